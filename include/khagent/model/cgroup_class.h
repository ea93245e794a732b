// The class of a cgroup or pod: what configuration rules assign, what the
// roll-up aggregates by, and what the controller protects or restrains.
#pragma once

#include <optional>
#include <string>

namespace khagent {

enum class CgroupClass { Online, Offline, System };
// "online", "offline", "system".
const char* class_name(CgroupClass c);
// The inverse of class_name; nullopt for anything else.
std::optional<CgroupClass> parse_class(const std::string& s);

}  // namespace khagent
