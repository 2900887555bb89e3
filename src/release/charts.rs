//! Inline SVG charts for the HTML memo: no external assets, no scripts, and fixed-precision
//! numbers so the same evidence always renders the same bytes.

use super::memo::{FiveNumber, MemoSlice};
use std::fmt::Write;

const WIDTH: f64 = 640.0;
const LABEL_W: f64 = 220.0;
const ROW_H: f64 = 26.0;
const PAD: f64 = 24.0;

/// Escape text for SVG (pack strings never become markup).
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Round outward to a "nice" axis maximum.
fn nice_max(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&m| m >= x)
        .unwrap_or(10.0 * magnitude)
}

/// Horizontal bars of the median speedup over the dense comparator per slice, with the
/// 95% interval as a whisker and a line at 1× (break-even).
pub fn speedup_chart(slices: &[MemoSlice]) -> String {
    let rows: Vec<(&MemoSlice, f64)> = slices.iter().filter_map(|s| s.speedup.map(|v| (s, v))).collect();
    if rows.is_empty() {
        return String::new();
    }
    let top = rows
        .iter()
        .map(|(s, v)| s.speedup_ci.map_or(*v, |c| c.1).max(*v))
        .fold(1.0, f64::max);
    let max = nice_max(top * 1.05);
    let plot_w = WIDTH - LABEL_W - PAD;
    let x = |v: f64| LABEL_W + plot_w * (v / max).clamp(0.0, 1.0);
    let height = PAD * 2.0 + ROW_H * rows.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} {height:.0}\" role=\"img\" \
         aria-label=\"Speedup over dense per slice\" class=\"chart\">\n"
    );
    for (i, (s, v)) in rows.iter().enumerate() {
        let y = PAD + ROW_H * i as f64;
        let colour = if *v >= 1.0 { "#1a7f37" } else { "#cf222e" };
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\">{}</text>\
             <rect x=\"{LABEL_W:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" opacity=\"0.75\"/>",
            LABEL_W - 6.0,
            y + ROW_H * 0.62,
            esc(&s.slice),
            y + 4.0,
            (x(*v) - LABEL_W).max(0.5),
            ROW_H - 8.0
        );
        if let Some((lo, hi)) = s.speedup_ci {
            let _ = writeln!(
                svg,
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#1b1f24\" stroke-width=\"1.5\"/>",
                x(lo),
                x(hi),
                y + ROW_H / 2.0,
                y + ROW_H / 2.0
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{v:.2}x</text>",
            x(*v) + 4.0,
            y + ROW_H * 0.62
        );
    }
    let axis_y = PAD + ROW_H * rows.len() as f64;
    let _ = writeln!(
        svg,
        "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\" stroke=\"#57606a\" stroke-dasharray=\"4 3\"/>\
         <text x=\"{0:.1}\" y=\"{3:.1}\" text-anchor=\"middle\" font-size=\"11\">1x (dense)</text>\
         <text x=\"{4:.1}\" y=\"{3:.1}\" text-anchor=\"end\" font-size=\"11\">{5}x</text>",
        x(1.0),
        PAD - 6.0,
        axis_y,
        axis_y + 16.0,
        WIDTH - PAD,
        max
    );
    svg.push_str("</svg>");
    svg
}

/// Box plots of the slice's latency samples against its interleaved dense comparator's:
/// whiskers at min/max, box at the quartiles, a bar at the median.
pub fn distribution_chart(slice: &MemoSlice) -> String {
    let rows: Vec<(&str, FiveNumber, &str)> = [
        (slice.sparsity.as_str(), slice.latency_summary, "#0969da"),
        ("dense comparator", slice.comparator_summary, "#8c959f"),
    ]
    .into_iter()
    .filter_map(|(label, f, colour)| f.map(|f| (label, f, colour)))
    .collect();
    if rows.is_empty() {
        return String::new();
    }
    let max = nice_max(rows.iter().map(|(_, f, _)| f.max).fold(0.0, f64::max) * 1e3 * 1.05);
    let plot_w = WIDTH - LABEL_W - PAD;
    let x = |seconds: f64| LABEL_W + plot_w * (seconds * 1e3 / max).clamp(0.0, 1.0);
    let height = PAD * 2.0 + ROW_H * rows.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} {height:.0}\" role=\"img\" \
         aria-label=\"Latency distribution of {}\" class=\"chart\">\n",
        esc(&slice.slice)
    );
    for (i, (label, f, colour)) in rows.iter().enumerate() {
        let y = PAD + ROW_H * i as f64;
        let mid = y + ROW_H / 2.0;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\">{}</text>\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{mid:.1}\" y2=\"{mid:.1}\" stroke=\"{colour}\"/>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" opacity=\"0.35\" stroke=\"{colour}\"/>",
            LABEL_W - 6.0,
            y + ROW_H * 0.62,
            esc(label),
            x(f.min),
            x(f.max),
            x(f.q1),
            y + 4.0,
            (x(f.q3) - x(f.q1)).max(0.5),
            ROW_H - 8.0,
        );
        let _ = writeln!(
            svg,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\" stroke=\"#1b1f24\" stroke-width=\"2\"/>",
            x(f.median),
            y + 4.0,
            y + ROW_H - 4.0
        );
    }
    let axis_y = PAD + ROW_H * rows.len() as f64 + 16.0;
    let _ = writeln!(
        svg,
        "<text x=\"{LABEL_W:.1}\" y=\"{axis_y:.1}\" font-size=\"11\">0</text>\
         <text x=\"{:.1}\" y=\"{axis_y:.1}\" text-anchor=\"end\" font-size=\"11\">{max} ms</text>",
        WIDTH - PAD
    );
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axis_maxima() {
        assert_eq!(nice_max(1.37), 2.0);
        assert_eq!(nice_max(2.2), 2.5);
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(esc("<b>&\""), "&lt;b&gt;&amp;&quot;");
    }
}
