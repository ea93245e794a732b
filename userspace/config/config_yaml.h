// What the file reader (config_file.cpp) asks of the YAML loader
// (config_yaml.cpp); not part of the config stage's interface.
#pragma once

#include <cstddef>

#include <yaml-cpp/yaml.h>

#include "khagent/config/config.h"

namespace khagent::config_yaml {

// How many entries of the document's `nodes` apply to `node`; entries whose
// match cannot be read count too (the loader reports them).
size_t applying_overrides(const YAML::Node& doc, const NodeIdentity& node);

}  // namespace khagent::config_yaml
