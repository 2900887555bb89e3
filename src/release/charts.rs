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

/// The sparse reality check (issue 24): per slice, the speedup its pattern promises
/// (`1 / density`, a dashed outline) against the median speedup measured over the dense
/// comparator (the bar, with its 95% interval as a whisker), a line at 1× (break-even), and
/// the share of latency lost to dense fallbacks in the label.
pub fn speedup_chart(slices: &[MemoSlice]) -> String {
    let rows: Vec<(&MemoSlice, f64)> = slices.iter().filter_map(|s| s.speedup.map(|v| (s, v))).collect();
    if rows.is_empty() {
        return String::new();
    }
    let top = rows
        .iter()
        .map(|(s, v)| {
            s.speedup_ci
                .map_or(*v, |c| c.1)
                .max(*v)
                .max(s.ideal_speedup.unwrap_or(0.0))
        })
        .fold(1.0, f64::max);
    let max = nice_max(top * 1.05);
    // Room right of the longest bar for its label.
    let plot_w = WIDTH - LABEL_W - PAD - 150.0;
    let x = |v: f64| LABEL_W + plot_w * (v / max).clamp(0.0, 1.0);
    let height = PAD * 2.0 + ROW_H * rows.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} {height:.0}\" role=\"img\" \
         aria-label=\"Sparse reality check: promised vs measured speedup per slice\" class=\"chart\">\n"
    );
    for (i, (s, v)) in rows.iter().enumerate() {
        let y = PAD + ROW_H * i as f64;
        let colour = if *v >= 1.0 { "#1a7f37" } else { "#cf222e" };
        if let Some(ideal) = s.ideal_speedup {
            let _ = writeln!(
                svg,
                "<rect x=\"{LABEL_W:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" \
                 stroke=\"#57606a\" stroke-dasharray=\"3 2\"/>",
                y + 2.0,
                (x(ideal) - LABEL_W).max(0.5),
                ROW_H - 4.0
            );
        }
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
        let mut label = format!("{v:.2}x");
        if let Some(ideal) = s.ideal_speedup {
            let _ = write!(label, " of {ideal:.2}x");
        }
        if let Some(share) = s.fallback_share.filter(|f| *f > 0.0) {
            let _ = write!(label, ", {:.0}% in fallback", share * 100.0);
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{label}</text>",
            x(*v).max(s.ideal_speedup.map_or(0.0, x)) + 4.0,
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
        x(max),
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

/// One roofline chart: the machine it is drawn for, where its roofs come from, the SVG.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RooflineChart {
    /// `cpu` or the preset's name.
    pub machine: String,
    /// Where the roofs come from.
    pub roofs_source: String,
    /// The slices on it, in the chart's numbering (1-based).
    pub rows: Vec<RooflineRow>,
    /// Inline SVG.
    pub svg: String,
}

/// A slice on a roofline chart.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RooflineRow {
    /// `pack/slice`.
    pub slice: String,
    /// Its point.
    pub point: crate::validate::RooflinePoint,
}

const ROOF_W: f64 = 480.0;
const ROOF_H: f64 = 360.0;
const ROOF_LEFT: f64 = 64.0;
const ROOF_RIGHT: f64 = 28.0;
const ROOF_TOP: f64 = 16.0;
const ROOF_BOTTOM: f64 = 52.0;

/// Powers of ten spanning `[lo, hi]` outward, as exponents.
fn decades(lo: f64, hi: f64) -> (i32, i32) {
    let lo = lo.max(1e-12).log10().floor() as i32;
    let hi = hi.max(1e-12).log10().ceil() as i32;
    (lo, hi.max(lo + 1))
}

/// A power of ten as an axis label: `0.01`, `1`, `1000`, `1e6`.
fn decade_label(e: i32) -> String {
    match e {
        -3..=-1 => format!("{}", 10f64.powi(e)),
        0..=3 => format!("{}", 10i64.pow(e as u32)),
        _ => format!("1e{e}"),
    }
}

/// One roofline per machine (this CPU with its measured roofs, each simulated preset with
/// its spec roofs), log-log: x = useful FLOP per compulsory byte, y = useful GFLOP/s. The
/// roof is `min(peak, bandwidth · x)`; each slice is a numbered dot (the number keys the
/// table under the chart, so labels never collide on a phone). Fixed-precision numbers, no
/// clock: the same evidence always draws the same bytes.
pub fn roofline_charts(slices: &[MemoSlice]) -> Vec<RooflineChart> {
    let mut machines: Vec<&str> = slices
        .iter()
        .filter_map(|s| s.diagnosis.as_ref()?.roofline.as_ref())
        .map(|r| r.machine.as_str())
        .collect();
    machines.sort_unstable();
    machines.dedup();
    machines
        .into_iter()
        .filter_map(|machine| {
            let points: Vec<(&MemoSlice, &crate::validate::RooflinePoint)> = slices
                .iter()
                .filter_map(|s| {
                    let r = s.diagnosis.as_ref()?.roofline.as_ref()?;
                    (r.machine == machine).then_some((s, r))
                })
                .collect();
            let first = points.first()?.1;
            Some(RooflineChart {
                machine: machine.to_owned(),
                roofs_source: first.roofs_source.clone(),
                rows: points
                    .iter()
                    .map(|(s, r)| RooflineRow {
                        slice: format!("{}/{}", s.pack, s.slice),
                        point: (*r).clone(),
                    })
                    .collect(),
                svg: roofline_svg(machine, &points),
            })
        })
        .collect()
}

fn roofline_svg(machine: &str, points: &[(&MemoSlice, &crate::validate::RooflinePoint)]) -> String {
    let roof = points[0].1;
    let (peak, bw, ridge) = (roof.peak_gflops, roof.bandwidth_gbps, roof.ridge_flop_per_byte);
    let xs = points.iter().map(|(_, r)| r.intensity_flop_per_byte);
    let ys = points.iter().map(|(_, r)| r.achieved_gflops_useful);
    let (x_lo, x_hi) = decades(
        xs.clone().fold(ridge, f64::min) / 2.0,
        xs.fold(ridge, f64::max) * 2.0,
    );
    let (y_lo, y_hi) = decades(
        ys.clone().fold(peak, f64::min) / 2.0,
        ys.fold(peak, f64::max) * 1.5,
    );
    let plot_w = ROOF_W - ROOF_LEFT - ROOF_RIGHT;
    let plot_h = ROOF_H - ROOF_TOP - ROOF_BOTTOM;
    let x = |v: f64| {
        ROOF_LEFT
            + plot_w * ((v.max(1e-12).log10() - f64::from(x_lo)) / f64::from(x_hi - x_lo)).clamp(0.0, 1.0)
    };
    let y = |v: f64| {
        ROOF_TOP
            + plot_h
                * (1.0 - ((v.max(1e-12).log10() - f64::from(y_lo)) / f64::from(y_hi - y_lo)).clamp(0.0, 1.0))
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {ROOF_W:.0} {ROOF_H:.0}\" role=\"img\" \
         aria-label=\"Roofline of {}\" class=\"chart roofline\" font-family=\"system-ui, sans-serif\">\n",
        esc(machine)
    );
    // Grid and decade labels.
    for e in x_lo..=x_hi {
        let gx = x(10f64.powi(e));
        let anchor = if e == x_hi { "end" } else { "middle" };
        let _ = writeln!(
            svg,
            "<line x1=\"{gx:.1}\" x2=\"{gx:.1}\" y1=\"{ROOF_TOP:.1}\" y2=\"{:.1}\" stroke=\"#d0d7de\"/>\
             <text x=\"{gx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" font-size=\"13\">{}</text>",
            ROOF_TOP + plot_h,
            ROOF_TOP + plot_h + 18.0,
            decade_label(e)
        );
    }
    for e in y_lo..=y_hi {
        let gy = y(10f64.powi(e));
        let _ = writeln!(
            svg,
            "<line x1=\"{ROOF_LEFT:.1}\" x2=\"{:.1}\" y1=\"{gy:.1}\" y2=\"{gy:.1}\" stroke=\"#d0d7de\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"13\">{}</text>",
            ROOF_LEFT + plot_w,
            ROOF_LEFT - 6.0,
            gy + 4.0,
            decade_label(e)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\">useful FLOP per byte moved (log)</text>\
         <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 14 {:.1})\">useful GFLOP/s (log)</text>",
        ROOF_LEFT + plot_w / 2.0,
        ROOF_H - 8.0,
        ROOF_TOP + plot_h / 2.0,
        ROOF_TOP + plot_h / 2.0
    );
    // The roofs: bandwidth slope up to the ridge, then the compute roof.
    let x_start = 10f64.powi(x_lo);
    let x_end = 10f64.powi(x_hi);
    let _ = writeln!(
        svg,
        "<polyline points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"none\" stroke=\"#1b1f24\" stroke-width=\"2.5\"/>\
         <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#57606a\" stroke-dasharray=\"4 3\"/>",
        x(x_start),
        y(bw * x_start),
        x(ridge),
        y(peak),
        x(x_end),
        y(peak),
        x(ridge),
        x(ridge),
        y(peak),
        ROOF_TOP + plot_h
    );
    // The ridge label reads away from the plot's nearer edge: right of the dashed line in
    // the left half, left of it in the right half (a ridge near the right edge cut the
    // label off, issue 24's layout check found it on phone and desktop alike).
    let (ridge_x, ridge_anchor) = if x(ridge) > ROOF_LEFT + plot_w / 2.0 {
        (x(ridge) - 4.0, "end")
    } else {
        (x(ridge) + 4.0, "start")
    };
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"13\">peak {peak:.1} GFLOP/s</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{ridge_anchor}\" font-size=\"13\">ridge {ridge:.2} FLOP/B</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"13\">{bw:.1} GB/s</text>",
        ROOF_LEFT + plot_w - 4.0,
        y(peak) - 6.0,
        ridge_x,
        ROOF_TOP + plot_h - 6.0,
        x(x_start) + 4.0,
        (y(bw * x_start) + 18.0).min(ROOF_TOP + plot_h - 6.0),
    );
    // Slices that land on the same spot (e.g. a fallback slice and its dense twin) share
    // one dot and one label, `1,3`, so numbers never print over each other.
    let mut spots: Vec<(String, String, Vec<usize>)> = Vec::new();
    for (i, (_, r)) in points.iter().enumerate() {
        let (px, py) = (
            format!("{:.1}", x(r.intensity_flop_per_byte)),
            format!("{:.1}", y(r.achieved_gflops_useful)),
        );
        match spots.iter_mut().find(|(sx, sy, _)| *sx == px && *sy == py) {
            Some(spot) => spot.2.push(i + 1),
            None => spots.push((px, py, vec![i + 1])),
        }
    }
    for (k, (px, py, numbers)) in spots.iter().enumerate() {
        let label: Vec<String> = numbers.iter().map(usize::to_string).collect();
        let (fx, fy): (f64, f64) = (px.parse().unwrap_or(0.0), py.parse().unwrap_or(0.0));
        let _ = writeln!(
            svg,
            "<circle cx=\"{px}\" cy=\"{py}\" r=\"5\" fill=\"#0969da\" stroke=\"#ffffff\" stroke-width=\"1\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\" fill=\"#0969da\">{}</text>",
            fx + 7.0,
            fy + if k % 2 == 0 { -6.0 } else { 15.0 },
            label.join(",")
        );
    }
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
    fn decades_span_the_data_outward() {
        assert_eq!(decades(0.3, 40.0), (-1, 2));
        assert_eq!(decades(5.0, 5.0), (0, 1));
        assert_eq!(decade_label(-2), "0.01");
        assert_eq!(decade_label(3), "1000");
        assert_eq!(decade_label(7), "1e7");
        assert_eq!(decade_label(4), "1e4");
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(esc("<b>&\""), "&lt;b&gt;&amp;&quot;");
    }
}
