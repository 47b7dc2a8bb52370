//! Benchmark charts as SVG, drawn with the plotters crate (its SVG backend writes
//! `<text>` elements itself, so no font library is needed): a rate sweep's CPU per GB
//! and loss against the offered rate, one line per receiver and the floor dashed, and a
//! bar chart with ranges for writers.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One point of a receiver's curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Offered rate, Gb/s.
    pub offered_gbps: f64,
    /// Receiver CPU seconds per GB delivered; `None` when nothing was.
    pub cpu_s_per_gb: Option<f64>,
    /// Loss, percent.
    pub loss_percent: f64,
}

/// One line on the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// Its points, in rising offered rate.
    pub points: Vec<Point>,
    /// The physical floor: drawn as a dashed grey line.
    pub floor: bool,
}

/// A rate sweep: CPU s/GB against offered Gb/s above, loss % against offered Gb/s below.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepChart {
    /// First line of the caption.
    pub title: String,
    /// Second line (machine, command).
    pub subtitle: String,
    /// The receivers.
    pub series: Vec<Series>,
}

/// One bar: a median with an optional (min, max) range.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Under the bar.
    pub label: String,
    /// Its height.
    pub median: f64,
    /// Drawn as an error bar.
    pub range: Option<(f64, f64)>,
}

/// A bar chart (e.g. writers' GB/s).
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// First line of the caption.
    pub title: String,
    /// Second line.
    pub subtitle: String,
    /// The y axis' unit.
    pub unit: String,
    /// The bars.
    pub bars: Vec<Bar>,
}

/// Colours of the receivers' lines, in order (the floor is grey).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
const GREY: RGBColor = RGBColor(110, 110, 110);

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("drawing the chart: {e}")
}

/// The upper end of an axis holding `max`: 10 % of headroom, at least `min`.
fn top(max: f64, min: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        (max * 1.1).max(min)
    } else {
        min
    }
}

/// Renders a sweep chart; an error when it has nothing to draw.
pub fn sweep_svg(chart: &SweepChart) -> Result<String, String> {
    let points = || chart.series.iter().flat_map(|s| s.points.iter());
    if points().next().is_none() {
        return Err(format!("{}: no measured point to draw", chart.title));
    }
    let x_max = top(points().map(|p| p.offered_gbps).fold(0.0, f64::max), 0.1);
    let cpu_max = top(
        points().filter_map(|p| p.cpu_s_per_gb).fold(0.0, f64::max),
        0.1,
    );
    let loss_max = top(points().map(|p| p.loss_percent).fold(0.0, f64::max), 1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 760)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&chart.title, ("sans-serif", 24)).map_err(err)?;
        let (head, body) = root.split_vertically(24);
        head.draw(&Text::new(
            chart.subtitle.clone(),
            (20, 4),
            ("sans-serif", 13).into_font().color(&GREY),
        ))
        .map_err(err)?;
        let (upper, lower) = body.split_vertically(440);
        let mut cpu = ChartBuilder::on(&upper)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..cpu_max)
            .map_err(err)?;
        cpu.configure_mesh()
            .x_desc("offered rate (Gb/s)")
            .y_desc("receiver CPU s per GB")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let mut loss = ChartBuilder::on(&lower)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..loss_max)
            .map_err(err)?;
        loss.configure_mesh()
            .x_desc("offered rate (Gb/s)")
            .y_desc("loss (%)")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let mut colour = COLOURS.iter().cycle();
        for s in &chart.series {
            let c = if s.floor {
                GREY
            } else {
                *colour.next().expect("cycle never ends")
            };
            let style = c.stroke_width(2);
            let cpu_pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter_map(|p| p.cpu_s_per_gb.map(|y| (p.offered_gbps, y)))
                .collect();
            let loss_pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|p| (p.offered_gbps, p.loss_percent))
                .collect();
            if s.floor {
                cpu.draw_series(DashedLineSeries::new(cpu_pts.clone(), 8, 6, style))
                    .map_err(err)?
                    .label(&s.name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(2))
                    });
                loss.draw_series(DashedLineSeries::new(loss_pts.clone(), 8, 6, style))
                    .map_err(err)?;
            } else {
                cpu.draw_series(LineSeries::new(cpu_pts.clone(), style))
                    .map_err(err)?
                    .label(&s.name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                loss.draw_series(LineSeries::new(loss_pts.clone(), style))
                    .map_err(err)?;
            }
            let marker = |(x, y)| Circle::new((x, y), 4, c.filled());
            cpu.draw_series(cpu_pts.into_iter().map(marker))
                .map_err(err)?;
            loss.draw_series(loss_pts.into_iter().map(marker))
                .map_err(err)?;
        }
        cpu.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(GREY)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Renders a bar chart; an error when it has no bar.
pub fn bars_svg(chart: &BarChart) -> Result<String, String> {
    if chart.bars.is_empty() {
        return Err(format!("{}: no bar to draw", chart.title));
    }
    let y_max = top(
        chart
            .bars
            .iter()
            .map(|b| b.range.map_or(b.median, |r| r.1.max(b.median)))
            .fold(0.0, f64::max),
        0.1,
    );
    let n = chart.bars.len();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&chart.title, ("sans-serif", 24)).map_err(err)?;
        let (head, body) = root.split_vertically(24);
        head.draw(&Text::new(
            chart.subtitle.clone(),
            (20, 4),
            ("sans-serif", 13).into_font().color(&GREY),
        ))
        .map_err(err)?;
        let mut c = ChartBuilder::on(&body)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
            .map_err(err)?;
        let labels: Vec<String> = chart.bars.iter().map(|b| b.label.clone()).collect();
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x: &f64| {
                let i = x - 0.5;
                if (i - i.round()).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i.round() as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(chart.unit.as_str())
            .draw()
            .map_err(err)?;
        for (i, b) in chart.bars.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let x0 = i as f64 + 0.15;
            let x1 = i as f64 + 0.85;
            c.draw_series(std::iter::once(Rectangle::new(
                [(x0, 0.0), (x1, b.median)],
                colour.mix(0.8).filled(),
            )))
            .map_err(err)?;
            if let Some((lo, hi)) = b.range {
                let mid = i as f64 + 0.5;
                c.draw_series(std::iter::once(ErrorBar::new_vertical(
                    mid,
                    lo,
                    b.median,
                    hi,
                    BLACK.stroke_width(2),
                    12,
                )))
                .map_err(err)?;
            }
            c.draw_series(std::iter::once(Text::new(
                format!("{:.2}", b.median),
                (
                    i as f64 + 0.5,
                    b.range.map_or(b.median, |r| r.1.max(b.median)) + y_max * 0.02,
                ),
                TextStyle::from(("sans-serif", 14).into_font())
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            )))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Writes `svg` to `path`, refusing to follow a symlink there.
pub fn write_svg(path: &Path, svg: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(svg.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> SweepChart {
        let pts = |c: f64| {
            vec![
                Point {
                    offered_gbps: 1.0,
                    cpu_s_per_gb: Some(c),
                    loss_percent: 0.0,
                },
                Point {
                    offered_gbps: 2.0,
                    cpu_s_per_gb: None,
                    loss_percent: 3.0,
                },
            ]
        };
        SweepChart {
            title: "bench udp: 1472-byte payloads".into(),
            subtitle: "test machine".into(),
            series: vec![
                Series {
                    name: "floor: recvmmsg loop".into(),
                    points: pts(0.5),
                    floor: true,
                },
                Series {
                    name: "fhudpsrc".into(),
                    points: pts(0.7),
                    floor: false,
                },
            ],
        }
    }

    #[test]
    fn a_sweep_draws_every_series_and_dashes_the_floor() {
        let svg = sweep_svg(&sweep()).unwrap();
        let t = svg.trim();
        assert!(t.starts_with("<svg") && t.ends_with("</svg>"), "{t}");
        for s in [
            "bench udp: 1472-byte payloads",
            "floor: recvmmsg loop",
            "fhudpsrc",
            "loss (%)",
        ] {
            assert!(svg.contains(s), "{s}");
        }
        // The dashed floor is drawn as many short segments in grey.
        let grey_lines = svg.matches("stroke=\"#6E6E6E\"").count();
        assert!(grey_lines > 10, "{grey_lines} grey strokes");
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        let mut c = sweep();
        for s in &mut c.series {
            s.points.clear();
        }
        assert!(sweep_svg(&c).unwrap_err().contains("no measured point"));
        let b = BarChart {
            title: "t".into(),
            subtitle: String::new(),
            unit: "GB/s".into(),
            bars: vec![],
        };
        assert!(bars_svg(&b).is_err());
    }

    #[test]
    fn bars_carry_labels_values_and_ranges() {
        let b = BarChart {
            title: "bench record".into(),
            subtitle: "x".into(),
            unit: "GB/s".into(),
            bars: vec![
                Bar {
                    label: "fio libaio".into(),
                    median: 1.73,
                    range: Some((1.48, 2.23)),
                },
                Bar {
                    label: "fhrecordsink raw".into(),
                    median: 1.67,
                    range: None,
                },
            ],
        };
        let svg = bars_svg(&b).unwrap();
        for s in ["fio libaio", "fhrecordsink raw", "1.73", "1.67", "GB/s"] {
            assert!(svg.contains(s), "{s}");
        }
    }

    #[test]
    fn write_svg_refuses_a_symlink() {
        let dir = std::env::temp_dir().join(format!("fh-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target.svg");
        let link = dir.join("link.svg");
        std::fs::write(&target, "keep").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_svg(&link, "<svg/>").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        write_svg(&dir.join("ok.svg"), "<svg/>").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
