// report.html: one offline file — plotly.js inlined, the data as JSON, and a small renderer for
// the heatmap (hover: time, model, GiB, phase; a model filter), memory over time per layer with
// phase bands, the block map with fragmentation, and the metric and energy tables.
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "core/fs.h"
#include "core/text.h"
#include "report/memory_report.h"

#ifndef INFERBENCH_PLOTLY_JS_PATH
#define INFERBENCH_PLOTLY_JS_PATH ""
#endif

namespace ib {
namespace {

using nlohmann::json;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr size_t kMaxLinePoints = 4000;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Series worth a line in GiB: every *_bytes column except device totals and free memory,
// which would flatten the rest.
bool drawn_as_line(const std::string& column) {
  return ends_with(column, "_bytes") && !ends_with(column, "_total_bytes") &&
         !ends_with(column, "_free_bytes");
}

json recording_json(const MemoryRecording& r) {
  const Timeline& tl = r.timeline;
  const size_t stride = std::max<size_t>(1, tl.rows.size() / kMaxLinePoints);
  json time_s = json::array();
  for (size_t k = 0; k < tl.rows.size(); k += stride) {
    time_s.push_back(static_cast<double>(tl.time_ns[k]) / 1e9);
  }
  json series = json::object();
  for (size_t c = 0; c < tl.columns.size(); ++c) {
    if (!drawn_as_line(tl.columns[c])) continue;
    json values = json::array();
    for (size_t k = 0; k < tl.rows.size(); k += stride) values.push_back(tl.rows[k][c] / kGiB);
    series[tl.columns[c]] = std::move(values);
  }
  json phases = json::array();
  for (const auto& p : r.phases) {
    phases.push_back(json{{"name", p.name},
                          {"start_s", static_cast<double>(p.start_ns) / 1e9},
                          {"end_s", static_cast<double>(p.end_ns) / 1e9}});
  }
  json block_map = nullptr;
  if (r.allocations && !r.allocations->block_map.frames.empty()) {
    const BlockMap& m = r.allocations->block_map;
    json frame_s = json::array();
    for (int64_t t : m.frame_time_ns) frame_s.push_back(static_cast<double>(t) / 1e9);
    json frag_t = json::array();
    json frag = json::array();
    for (const auto& p : r.allocations->fragmentation) {
      frag_t.push_back(static_cast<double>(p.time_ns) / 1e9);
      frag.push_back(p.external);
    }
    block_map = json{{"states", m.states},         {"frame_s", frame_s},
                     {"frames", m.frames},         {"cells_per_row", m.cells_per_row},
                     {"cell_bytes", m.cell_bytes}, {"num_cells", m.num_cells},
                     {"frag_t_s", frag_t},         {"frag_external", frag}};
  }
  return json{{"label", r.label},
              {"time_s", time_s},
              {"series", series},
              {"phases", phases},
              {"block_map", block_map}};
}

constexpr const char* kStyle = R"(
body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0}h2{font-size:16px;margin-top:28px}
.sub{color:#555;margin:4px 0 16px}.note{color:#555;font-size:12px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}#models label{margin-right:12px}
)";

constexpr const char* kRenderer = R"JS(
(function () {
  const D = JSON.parse(document.getElementById('ib-data').textContent);
  const cfg = {responsive: true, displaylogo: false, toImageButtonOptions: {format: 'svg'}};
  const models = [...new Set(D.heatmap.rows.map(r => r.model))];
  const shown = new Set(models);

  function drawHeatmap() {
    const rows = D.heatmap.rows.filter(r => shown.has(r.model));
    const x = Array.from({length: D.heatmap.frames}, (_, f) => (f + 0.5) * D.heatmap.frame_s);
    Plotly.react('heatmap', [{
      type: 'heatmap', x: x, y: rows.map(r => r.label), z: rows.map(r => r.gib),
      customdata: rows.map(r => r.detail), colorscale: 'Viridis', zmin: 0, zmax: D.heatmap.zmax_gib,
      zsmooth: false, hoverongaps: false, colorbar: {title: {text: 'GiB'}},
      hovertemplate: '%{y}<br>t=%{x:.2f} s<br>%{z:.3f} GiB<br>phase: %{customdata}<extra></extra>'
    }], {
      margin: {l: 220, r: 20, t: 10, b: 50}, height: 140 + 26 * Math.max(rows.length, 3),
      xaxis: {title: {text: 'time since the phase started (s)'}},
      yaxis: {autorange: 'reversed', automargin: true}
    }, cfg);
  }

  function drawModels() {
    const box = document.getElementById('models');
    for (const m of models) {
      const label = document.createElement('label');
      const input = document.createElement('input');
      input.type = 'checkbox'; input.checked = true; input.value = m;
      input.addEventListener('change', () => {
        if (input.checked) shown.add(m); else shown.delete(m);
        drawHeatmap();
      });
      label.appendChild(input); label.appendChild(document.createTextNode(' ' + m));
      box.appendChild(label);
    }
  }

  const bands = ['rgba(31,119,180,0.08)', 'rgba(255,127,14,0.08)', 'rgba(44,160,44,0.08)'];
  function drawRecording(i) {
    const r = D.recordings[i];
    const traces = Object.keys(r.series).map(name => ({
      type: 'scatter', mode: 'lines', name: name, x: r.time_s, y: r.series[name],
      hovertemplate: name + ': %{y:.3f} GiB at %{x:.2f} s<extra></extra>'}));
    const shapes = r.phases.map((p, k) => ({type: 'rect', xref: 'x', yref: 'paper', x0: p.start_s,
      x1: p.end_s, y0: 0, y1: 1, fillcolor: bands[k % bands.length], line: {width: 0}, layer: 'below'}));
    const notes = r.phases.map(p => ({x: (p.start_s + p.end_s) / 2, y: 1.02, xref: 'x', yref: 'paper',
      text: p.name, showarrow: false, font: {size: 10}}));
    Plotly.react('lines', traces, {margin: {t: 30}, height: 420, shapes: shapes, annotations: notes,
      xaxis: {title: {text: 'time since the benchmark started (s)'}},
      yaxis: {title: {text: 'GiB'}}}, cfg);
    const section = document.getElementById('blockmap-section');
    if (!r.block_map) { section.style.display = 'none'; return; }
    section.style.display = '';
    drawBlockMap(r.block_map);
  }

  const stateColours = {unmapped: '#ffffff', free: '#d9d9d9', weights: '#4e79a7',
    kv_cache: '#f28e2b', activations: '#59a14f', workspace: '#76b7b2', cuda_graphs: '#b07aa1',
    other: '#9c755f'};
  function drawBlockMap(m) {
    const n = m.states.length;
    const scale = [];
    m.states.forEach((s, k) => {
      const c = stateColours[s] || '#000000';
      scale.push([k / n, c]); scale.push([(k + 1) / n, c]);
    });
    const rows = m.frames.length ? m.frames[0].length : 0;
    const z = Array.from({length: rows}, (_, y) => m.frames.map(f => f[y]));
    const text = z.map(row => row.map(v => m.states[v]));
    const mib = m.cells_per_row * m.cell_bytes / 1048576;
    Plotly.react('blockmap', [{
      type: 'heatmap', x: m.frame_s, z: z, text: text, zmin: -0.5, zmax: n - 0.5,
      colorscale: scale, zsmooth: false,
      colorbar: {tickvals: m.states.map((_, k) => k), ticktext: m.states},
      hovertemplate: 'row %{y} (' + mib.toFixed(2) + ' MiB each)<br>t=%{x:.2f} s<br>%{text}<extra></extra>'
    }], {margin: {t: 10}, height: 420, xaxis: {title: {text: 'time (s)'}},
      yaxis: {title: {text: 'address order (rows of ' + mib.toFixed(2) + ' MiB)'}}}, cfg);
    Plotly.react('fragmentation', [{type: 'scatter', mode: 'lines', line: {shape: 'hv'},
      x: m.frag_t_s, y: m.frag_external, name: 'external fragmentation'}],
      {margin: {t: 10}, height: 220, xaxis: {title: {text: 'time (s)'}},
       yaxis: {title: {text: 'external fragmentation'}, range: [0, 1]}}, cfg);
  }

  function fillTable(id, header, rows) {
    const t = document.getElementById(id);
    if (!rows.length) { t.parentNode.style.display = 'none'; return; }
    const tr = t.insertRow();
    for (const h of header) { const th = document.createElement('th'); th.textContent = h; tr.appendChild(th); }
    for (const r of rows) {
      const row = t.insertRow();
      for (const v of r) row.insertCell().textContent =
          (typeof v === 'number') ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : (v ?? '');
    }
  }

  drawModels();
  drawHeatmap();
  const pick = document.getElementById('recording');
  D.recordings.forEach((r, i) => pick.add(new Option(r.label, i)));
  pick.addEventListener('change', () => drawRecording(Number(pick.value)));
  if (D.recordings.length) drawRecording(0);
  fillTable('metrics', ['metric', 'unit', 'median', 'min', 'max'],
            D.metrics.map(m => [m.metric, m.unit, m.median, m.min, m.max]));
  const phases = (D.energy && D.energy.phases) || [];
  const e = D.energy || {};
  const stepRows = [['prefill-heavy steps', e.prefill_heavy_steps], ['decode-heavy steps', e.decode_heavy_steps]]
      .filter(([, v]) => v).map(([name, v]) => [name, v.time_s, v.joules,
          v.prompt_tokens ?? v.output_tokens, v.tokens_per_joule, e.method]);
  fillTable('energy', ['phase', 'duration (s)', 'joules', 'tokens', 'tokens per joule', 'method'],
            phases.map(p => [p.phase, p.duration_s, p.joules, p.output_tokens, p.tokens_per_joule,
                             p.method]).concat(stepRows));
  document.getElementById('energy-note').textContent = D.energy && D.energy.available
      ? 'method: ' + D.energy.method + (D.energy.flag ? ' (' + D.energy.flag + ')' : '')
      : (D.energy && D.energy.reason) || 'no energy measurement';
})();
)JS";

// JSON placed inside <script> must not close it early: "</" becomes "<\\/" (the same string).
std::string json_in_script(std::string s) {
  for (size_t pos = 0; (pos = s.find("</", pos)) != std::string::npos; pos += 3) {
    s.replace(pos, 2, "<\\/");
  }
  return s;
}

// JavaScript inside <script>: only "</script" ends the element; in the string and regular
// expression literals where it can occur, "<\\/script" means the same.
std::string js_in_script(std::string s) {
  for (size_t pos = 0; (pos = s.find("</script", pos)) != std::string::npos; pos += 9) {
    s.replace(pos, 2, "<\\/");
  }
  return s;
}

}  // namespace

std::string report_html(const HtmlReport& r, const std::string& plotly_js) {
  json heatmap_rows = json::array();
  for (const auto& row : r.heatmap.rows) {
    heatmap_rows.push_back(
        json{{"label", row.label}, {"model", row.model}, {"gib", row.gib}, {"detail", row.detail}});
  }
  json recordings = json::array();
  for (const auto& rec : r.recordings) recordings.push_back(recording_json(rec));
  const json data{{"heatmap",
                   {{"rows", heatmap_rows},
                    {"frames", r.heatmap.frames},
                    {"frame_s", r.heatmap.frame_s},
                    {"zmax_gib", r.heatmap.zmax_gib}}},
                  {"recordings", recordings},
                  {"metrics", r.metrics},
                  {"energy", r.energy}};
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<title>" + escape_markup(r.title) + "</title>\n<style>" + kStyle + "</style>\n";
  html += "<script>" + js_in_script(plotly_js) + "</script>\n</head>\n<body>\n";
  html += "<h1>" + escape_markup(r.title) + "</h1>\n<p class=\"sub\">" + escape_markup(r.subtitle) +
          "</p>\n";
  html += "<h2>Memory heatmap</h2>\n<p class=\"note\">" + escape_markup(r.heatmap.caption) +
          fmt::format(
              "; one row per phase, aligned at its start; frames of {:.3g} s, linear "
              "interpolation between samples; one colour scale for every row.",
              r.heatmap.frame_s) +
          "</p>\n<div id=\"models\"></div>\n<div id=\"heatmap\"></div>\n";
  html +=
      "<h2>Memory over time, per layer</h2>\n<p>Run: <select id=\"recording\"></select></p>\n"
      "<div id=\"lines\"></div>\n";
  html +=
      "<div id=\"blockmap-section\"><h2>Block map (allocation trace)</h2>\n<p class=\"note\">"
      "Address order top to bottom, 64 KiB cells grouped into rows (majority state). Free = "
      "cells held earlier and released; unmapped = never held yet.</p>\n<div id=\"blockmap\"></div>"
      "\n<div id=\"fragmentation\"></div></div>\n";
  html += "<div><h2>Metrics (median over runs)</h2>\n<table id=\"metrics\"></table></div>\n";
  html +=
      "<div><h2>Energy</h2>\n<p class=\"note\" id=\"energy-note\"></p>\n<table "
      "id=\"energy\"></table></div>\n";
  html += "<script type=\"application/json\" id=\"ib-data\">" + json_in_script(data.dump()) +
          "</script>\n";
  html += std::string("<script>") + kRenderer + "</script>\n</body>\n</html>\n";
  return html;
}

Result<std::string> load_plotly_js() {
  const char* env = std::getenv("INFERBENCH_PLOTLY_JS");
  const std::string path = env != nullptr && *env != '\0' ? env : INFERBENCH_PLOTLY_JS_PATH;
  if (path.empty()) {
    return runtime_error(
        "report.html skipped: no plotly.js path; run scripts/install-deps or set "
        "INFERBENCH_PLOTLY_JS to plotly.min.js");
  }
  auto text = read_file(path);
  if (!text.ok()) {
    return runtime_error(fmt::format(
        "report.html skipped: plotly.js not found at {}; run scripts/install-deps (npm package "
        "plotly.js-dist-min) or set INFERBENCH_PLOTLY_JS",
        path));
  }
  return std::move(text).value();
}

}  // namespace ib
