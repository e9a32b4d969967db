//! A minimal SVG line chart, enough for docs/fec.md's plots.

use std::fmt::Write;

pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) color: &'a str,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A chart of `series` over x in [0, x_max] and y in [0, y_max].
pub(crate) fn chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    x_max: f64,
    y_max: f64,
    series: &[Series<'_>],
) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 360.0, 60.0, 20.0, 30.0, 45.0);
    let px = |x: f64| left + (x / x_max) * (w - left - right);
    let py = |y: f64| top + (1.0 - (y / y_max).clamp(0.0, 1.0)) * (h - top - bottom);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="14">{title}</text>"#,
        w / 2.0
    );
    // Axes, ticks and grid.
    // Whole-number x ticks when they fit, else five.
    let nx = if x_max <= 10.0 && x_max.fract() == 0.0 {
        x_max as u32
    } else {
        5
    };
    for i in 0..=5 {
        let y = y_max * f64::from(i) / 5.0;
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{py}" y2="{py}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            w - right,
            left - 5.0,
            py(y) + 4.0,
            trim(y),
            py = py(y)
        );
    }
    for i in 0..=nx {
        let x = x_max * f64::from(i) / f64::from(nx);
        let _ = write!(
            s,
            r##"<line x1="{px}" x2="{px}" y1="{top}" y2="{}" stroke="#ddd"/><text x="{px}" y="{}" text-anchor="middle">{}</text>"##,
            h - bottom,
            h - bottom + 15.0,
            trim(x),
            px = px(x)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{x_label}</text><text x="14" y="{}" text-anchor="middle" transform="rotate(-90 14 {})">{y_label}</text>"#,
        (left + w - right) / 2.0,
        h - 8.0,
        (top + h - bottom) / 2.0,
        (top + h - bottom) / 2.0
    );
    for (i, series) in series.iter().enumerate() {
        let mut d = String::new();
        for (j, &(x, y)) in series.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if j == 0 { "M" } else { "L" },
                px(x),
                py(y)
            );
        }
        let _ = write!(
            s,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.5"/>"#,
            series.color
        );
        let ly = top + 14.0 + 16.0 * i as f64;
        let _ = write!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            w - right - 200.0,
            w - right - 180.0,
            series.color,
            w - right - 175.0,
            ly + 4.0,
            series.name
        );
    }
    s.push_str("</svg>\n");
    s
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
