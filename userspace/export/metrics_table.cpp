// The helper the parts of Metrics build their families with: one table row
// (metrics_parts.h) becomes one registered family.
#include <stdexcept>

#include <fmt/format.h>

#include "metrics_parts.h"

namespace khagent::metrics {

namespace {

template <typename T>
constexpr MetricType type_of() {
  if constexpr (std::is_same_v<T, Counter>) return MetricType::Counter;
  if constexpr (std::is_same_v<T, Gauge>) return MetricType::Gauge;
  return MetricType::Histogram;
}

template <typename T>
prometheus::Family<T>& build_family(prometheus::Registry& r, const FamilySpec& spec) {
  if (spec.type != type_of<T>())
    throw std::logic_error(fmt::format("metrics: {} registered as another type", spec.name));
  if constexpr (std::is_same_v<T, Counter>)
    return prometheus::BuildCounter().Name(spec.name).Help(spec.help).Register(r);
  if constexpr (std::is_same_v<T, Gauge>) return prometheus::BuildGauge().Name(spec.name).Help(spec.help).Register(r);
  if constexpr (std::is_same_v<T, Histogram>)
    return prometheus::BuildHistogram().Name(spec.name).Help(spec.help).Register(r);
}

// The row's label names zipped with `values`, which must be as many.
prometheus::Labels labels_of(const FamilySpec& spec, std::initializer_list<std::string_view> values) {
  prometheus::Labels out;
  size_t i = 0;
  for (auto v : values) {
    if (i >= kMaxLabels || !spec.labels[i])
      throw std::logic_error(fmt::format("metrics: {} has fewer labels than values", spec.name));
    out.emplace(spec.labels[i++], std::string(v));
  }
  if (i < kMaxLabels && spec.labels[i])
    throw std::logic_error(fmt::format("metrics: {} has more labels than values", spec.name));
  return out;
}

}  // namespace

template <typename T>
TableFamily<T>::TableFamily(prometheus::Registry& r, const FamilySpec& spec)
    : spec_(&spec), family_(&build_family<T>(r, spec)) {}

template <typename T>
T& TableFamily<T>::add(std::initializer_list<std::string_view> values)
  requires(!std::is_same_v<T, Histogram>)
{
  return family_->Add(labels_of(*spec_, values));
}

template <typename T>
T& TableFamily<T>::add(std::initializer_list<std::string_view> values, const std::vector<double>& bounds)
  requires std::is_same_v<T, Histogram>
{
  return family_->Add(labels_of(*spec_, values), bounds);
}

template class TableFamily<Counter>;
template class TableFamily<Gauge>;
template class TableFamily<Histogram>;

}  // namespace khagent::metrics
