//! Inline SVG charts for the HTML memo: no external assets, no scripts, and fixed-precision
//! numbers so the same evidence always renders the same bytes.

use super::memo::{FiveNumber, MemoSlice, MemoTrend};
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

/// A slice's recent history: one dot per recorded run joined by a line, the newest (this
/// run) filled, and a dashed vertical line before each change point. The y axis spans the
/// values' range, so a small drift is visible; the labels give the range.
pub fn trend_chart(trend: &MemoTrend) -> String {
    const HEIGHT: f64 = 160.0;
    let n = trend.points.len();
    if n == 0 {
        return String::new();
    }
    let (lo, hi) = trend
        .points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, v)| {
            (lo.min(v), hi.max(v))
        });
    let span = if hi > lo { hi - lo } else { hi.abs().max(1e-300) };
    let (left, right, top, bottom) = (PAD * 3.0, WIDTH - PAD, PAD, HEIGHT - PAD);
    let x = |i: usize| {
        if n == 1 {
            (left + right) / 2.0
        } else {
            left + (right - left) * i as f64 / (n - 1) as f64
        }
    };
    let y = |v: f64| bottom - (bottom - top) * ((v - lo) / span).clamp(0.0, 1.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} {HEIGHT:.0}\" role=\"img\" \
         aria-label=\"{} of {} over recorded runs\" class=\"chart\">\n",
        esc(&trend.metric),
        esc(&trend.slice)
    );
    for &c in &trend.change_points {
        let cx = if c == 0 { x(0) } else { (x(c - 1) + x(c)) / 2.0 };
        let _ = writeln!(
            svg,
            "<line x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" stroke=\"#cf222e\" stroke-dasharray=\"4 3\"/>"
        );
    }
    let path: Vec<String> = trend
        .points
        .iter()
        .enumerate()
        .map(|(i, &(_, v))| format!("{:.1},{:.1}", x(i), y(v)))
        .collect();
    let _ = writeln!(
        svg,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#0969da\" stroke-width=\"1.5\"/>",
        path.join(" ")
    );
    for (i, &(_, v)) in trend.points.iter().enumerate() {
        let fill = if i + 1 == n { "#0969da" } else { "#ffffff" };
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{fill}\" stroke=\"#0969da\"/>",
            x(i),
            y(v)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{hi:.4e}</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{lo:.4e}</text>\
         <text x=\"{left:.1}\" y=\"{:.1}\" font-size=\"11\">run {}</text>\
         <text x=\"{right:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">run {}</text>",
        left - 4.0,
        top + 4.0,
        left - 4.0,
        bottom,
        bottom + 16.0,
        trend.points[0].0,
        bottom + 16.0,
        trend.points[n - 1].0
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
    fn trend_chart_marks_change_points_and_is_byte_stable() {
        let trend = MemoTrend {
            pack: "p".into(),
            slice: "s<1>".into(),
            metric: "latency".into(),
            points: vec![(1, 1.0), (2, 1.0), (3, 2.0), (4, 2.0)],
            change_points: vec![2],
        };
        let svg = trend_chart(&trend);
        assert_eq!(svg, trend_chart(&trend));
        assert_eq!(svg.matches("<circle").count(), 4);
        assert_eq!(svg.matches("stroke-dasharray").count(), 1);
        assert!(svg.contains("s&lt;1&gt;") && svg.contains("run 4"));
        let flat = MemoTrend {
            points: vec![(1, 3.0)],
            change_points: vec![],
            ..trend
        };
        assert!(!trend_chart(&flat).contains("NaN"));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(esc("<b>&\""), "&lt;b&gt;&amp;&quot;");
    }
}
