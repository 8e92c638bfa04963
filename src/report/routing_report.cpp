// expert_load.svg (routing_report.h): a layer x expert grid on viridis, with a colour bar.
#include "report/routing_report.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "core/text.h"
#include "report/detail/viridis.h"

namespace ib {

std::string expert_load_svg(const nlohmann::json& routing, const std::string& title) {
  if (!routing.is_object() || !routing.contains("tokens_per_layer_expert")) return "";
  const auto counts =
      routing["tokens_per_layer_expert"].get<std::vector<std::vector<int64_t>>>();  // (L, E)
  if (counts.empty() || counts[0].empty()) return "";
  const size_t layers = counts.size(), experts = counts[0].size();
  std::vector<std::vector<double>> ratio(layers);  // load / the layer's mean load
  double zmax = 1.0;
  for (size_t l = 0; l < layers; ++l) {
    const double sum =
        static_cast<double>(std::accumulate(counts[l].begin(), counts[l].end(), int64_t{0}));
    const double mean = sum / static_cast<double>(experts);
    for (int64_t c : counts[l]) {
      ratio[l].push_back(mean > 0 ? static_cast<double>(c) / mean : 0.0);
      zmax = std::max(zmax, ratio[l].back());
    }
  }
  constexpr int kLeft = 70, kTop = 46, kCell = 22;
  const int cell_w = std::max(kCell, 560 / static_cast<int>(experts));
  const int cell_h = std::clamp(600 / static_cast<int>(layers), 6, kCell);
  const int plot_w = cell_w * static_cast<int>(experts), plot_h = cell_h * static_cast<int>(layers);
  const int width = kLeft + plot_w + 110, height = kTop + plot_h + 70;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{2}\" y=\"20\" font-size=\"14\" "
      "font-weight=\"bold\">{3}</text>\n",
      width, height, kLeft, escape_markup(title));
  s += "<g shape-rendering=\"crispEdges\">\n";
  for (size_t l = 0; l < layers; ++l) {
    for (size_t e = 0; e < experts; ++e) {
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>layer {} expert "
          "{}: {} tokens, {:.2f} x the mean</title></rect>\n",
          kLeft + static_cast<int>(e) * cell_w, kTop + static_cast<int>(l) * cell_h, cell_w, cell_h,
          detail::viridis_hex(ratio[l][e] / zmax), l, e, counts[l][e], ratio[l][e]);
    }
  }
  s += "</g>\n";
  for (size_t e = 0; e < experts; ++e) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     kLeft + static_cast<int>(e) * cell_w + cell_w / 2, kTop - 6, e);
  }
  const size_t label_every = std::max<size_t>(1, 14 / static_cast<size_t>(cell_h));
  for (size_t l = 0; l < layers; l += label_every) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">layer {}</text>\n", kLeft - 6,
                     kTop + static_cast<int>(l) * cell_h + cell_h / 2 + 4, l);
  }
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" fill=\"#555\">expert (columns); colour: tokens routed / the layer's "
      "mean (1 = even); top-{} routing</text>\n",
      kLeft, kTop + plot_h + 20, routing.value("experts_per_token", 0));
  const int bar_x = kLeft + plot_w + 30;
  s += "<defs><linearGradient id=\"viridis\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (size_t i = 0; i < detail::kViridis.size(); ++i) {
    s += fmt::format("<stop offset=\"{:.3f}\" stop-color=\"#{:06x}\"/>",
                     static_cast<double>(i) / (detail::kViridis.size() - 1), detail::kViridis[i]);
  }
  s += "</linearGradient></defs>\n";
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"16\" height=\"{}\" fill=\"url(#viridis)\" "
      "stroke=\"#888\"/>\n",
      bar_x, kTop, plot_h);
  s += fmt::format("<text x=\"{}\" y=\"{}\">{:.2f}</text>\n", bar_x + 20, kTop + 8, zmax);
  s += fmt::format("<text x=\"{}\" y=\"{}\">0</text>\n", bar_x + 20, kTop + plot_h);
  s += "</svg>\n";
  return s;
}

}  // namespace ib
