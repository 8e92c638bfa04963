// Small text helpers shared by the report writers (HTML, SVG, Markdown).
#pragma once

#include <string>
#include <string_view>

namespace ib {

// Escapes <, >, & and " for HTML/XML text and attribute values.
std::string escape_markup(std::string_view text);

}  // namespace ib
