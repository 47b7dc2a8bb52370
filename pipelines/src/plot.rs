//! Benchmark charts as SVG, drawn with the plotters crate. Its SVG backend writes
//! `<text>` elements and leaves the glyphs to whoever views the file, so no font
//! library is linked; the price is that text widths here are estimates, which is why
//! long texts are wrapped by a conservative characters-per-line count rather than
//! measured.
//!
//! Two charts: a rate sweep (receiver CPU per GB above, loss below, both against the
//! offered rate, one line per receiver and the floor dashed in grey, the legend in a
//! column of its own so that it never hides a point) and a bar chart with ranges.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One point of a receiver's curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Offered rate, Gb/s.
    pub offered_gbps: f64,
    /// Receiver CPU seconds per GB delivered; `None` when nothing was delivered, and
    /// then the point is left out of the CPU panel (and its line broken there).
    pub cpu_s_per_gb: Option<f64>,
    /// Loss, percent.
    pub loss_percent: f64,
}

/// One line on the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// Its points, in rising offered rate (they are joined in this order).
    pub points: Vec<Point>,
    /// The physical floor: drawn as a dashed grey line under the receivers.
    pub floor: bool,
}

/// A rate sweep: CPU s/GB against offered Gb/s above, loss % against offered Gb/s
/// below, on linear axes that start at 0.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepChart {
    /// First line of the caption.
    pub title: String,
    /// Second line (machine, command); wrapped when long.
    pub subtitle: String,
    /// The receivers (and floors), in legend order.
    pub series: Vec<Series>,
}

/// One bar: a median with an optional (min, max) range.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Under the bar; wrapped when long.
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
    /// Second line; wrapped when long.
    pub subtitle: String,
    /// The y axis' unit.
    pub unit: String,
    /// The bars, left to right.
    pub bars: Vec<Bar>,
}

/// Colours of the receivers' lines, in order (matplotlib's "tab10", which stays
/// distinguishable for the colour-blind better than pure hues; the floor is grey).
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
/// The floor's line and the subtitle.
const GREY: RGBColor = RGBColor(110, 110, 110);
/// The error bars: near-black, apart from the axes' black.
const INK: RGBColor = RGBColor(40, 40, 40);
/// Faint enough for grid lines not to compete with the data.
const GRID: RGBColor = RGBColor(225, 225, 225);

/// Marker shapes, cycled with the colours so that lines stay apart in grey print.
const SHAPES: [Shape; 5] = [
    Shape::Circle,
    Shape::Square,
    Shape::Triangle,
    Shape::Diamond,
    Shape::InvTriangle,
];

const SWEEP_SIZE: (u32, u32) = (1000, 760);
const BARS_SIZE: (u32, u32) = (1000, 540);

// Text sizes in output pixels.
const TITLE_PX: f64 = 20.0;
const SUBTITLE_PX: f64 = 13.0;
const TICK_PX: f64 = 12.0;
const DESC_PX: f64 = 13.0;
const LEGEND_PX: f64 = 13.0;
const VALUE_PX: f64 = 13.0;
const LABEL_PX: f64 = 12.0;

/// Dash and gap of the floor's line, pixels.
const DASH: (u32, u32) = (7, 5);

/// A marker's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Circle,
    Square,
    Triangle,
    Diamond,
    InvTriangle,
    /// The floor's small dot: it marks where it was measured without competing.
    Dot,
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Panel<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("drawing the chart: {e}")
}

/// A font `px` output pixels high: plotters' SVG backend writes a font's size divided
/// by 1.24, so the size handed to it is scaled up by as much.
fn font(px: f64) -> FontDesc<'static> {
    ("sans-serif", px * 1.24).into_font()
}

/// How many characters of a `px` font fit in `width` pixels: 0.6 em a character is
/// wider than sans-serif's average, so the estimate errs towards wrapping.
fn chars_fitting(width: u32, px: f64) -> usize {
    ((f64::from(width) / (px * 0.6)) as usize).max(8)
}

/// Splits `text` into lines of at most `max` characters at spaces, cutting words
/// longer than a line.
fn wrap(text: &str, max: usize) -> Vec<String> {
    let max = max.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > max {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..max).collect());
        }
        let word: String = word.into_iter().collect();
        if line.is_empty() {
            line = word;
        } else if line.chars().count() + 1 + word.chars().count() <= max {
            line.push(' ');
            line.push_str(&word);
        } else {
            lines.push(std::mem::replace(&mut line, word));
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The upper end of an axis holding `max`: 10 % of headroom, at least `min`.
fn top(max: f64, min: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        (max * 1.1).max(min)
    } else {
        min
    }
}

/// A value as printed above its bar: three significant figures or so.
fn value_text(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Shape {
    /// The radius of a round marker, pixels; `None` for a polygon.
    fn radius(self) -> Option<i32> {
        match self {
            Shape::Circle => Some(5),
            Shape::Dot => Some(3),
            _ => None,
        }
    }

    /// A polygon marker's corners in pixels around its point (about as large as the
    /// circle, so that no receiver looks heavier than another).
    fn corners(self) -> Vec<(i32, i32)> {
        match self {
            Shape::Square => vec![(-4, -4), (4, -4), (4, 4), (-4, 4)],
            Shape::Triangle => vec![(0, -6), (5, 4), (-5, 4)],
            Shape::Diamond => vec![(0, -6), (6, 0), (0, 6), (-6, 0)],
            Shape::InvTriangle => vec![(0, 6), (5, -4), (-5, -4)],
            Shape::Circle | Shape::Dot => Vec::new(),
        }
    }
}

/// Draws a marker of `shape` at each of `points` on `area`, in whatever coordinates
/// the area has: the shape itself is in pixels around its point, so it keeps its
/// size whatever the axes.
fn markers<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    points: &[CT::From],
    shape: Shape,
    colour: RGBColor,
) -> Result<(), String>
where
    CT::From: Clone,
{
    let fill = colour.filled();
    for p in points {
        let at = EmptyElement::at(p.clone());
        match shape.radius() {
            Some(r) => area.draw(&(at + Circle::new((0, 0), r, fill))),
            None => area.draw(&(at + Polygon::new(shape.corners(), fill))),
        }
        .map_err(err)?;
    }
    Ok(())
}

/// Draws the title and the subtitle centred at the top of `root`, each wrapped to the
/// width, and returns the area below them.
fn header<'a>(root: &Area<'a>, title: &str, subtitle: &str) -> Result<Area<'a>, String> {
    let (w, _) = root.dim_in_pixel();
    let centre = Pos::new(HPos::Center, VPos::Top);
    let mut y = 10;
    for line in wrap(title, chars_fitting(w - 40, TITLE_PX)) {
        root.draw(&Text::new(
            line,
            (w as i32 / 2, y),
            TextStyle::from(font(TITLE_PX)).pos(centre),
        ))
        .map_err(err)?;
        y += 26;
    }
    y += 2;
    for line in wrap(subtitle, chars_fitting(w - 40, SUBTITLE_PX)) {
        root.draw(&Text::new(
            line,
            (w as i32 / 2, y),
            font(SUBTITLE_PX).color(&GREY).pos(centre),
        ))
        .map_err(err)?;
        y += 18;
    }
    Ok(root.split_vertically(y + 6).1)
}

/// One panel of the sweep: linear axes from 0, horizontal grid lines only, the x
/// axis' description only where asked (the bottom panel), so that two panels share it.
fn panel<'a, 'b>(
    area: &'a Area<'b>,
    x_max: f64,
    y_max: f64,
    y_desc: &str,
    x_desc: Option<&str>,
) -> Result<Panel<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(area)
        // The lower panel's top tick label must clear the upper panel's x labels.
        .margin_top(if x_desc.is_some() { 20 } else { 10 })
        .margin_right(16)
        .margin_left(8)
        .x_label_area_size(if x_desc.is_some() { 48 } else { 26 })
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.max_light_lines(0)
        .bold_line_style(GRID)
        .label_style(font(TICK_PX))
        .axis_desc_style(font(DESC_PX))
        .y_desc(y_desc);
    if let Some(d) = x_desc {
        mesh.x_desc(d);
    }
    mesh.draw().map_err(err)?;
    Ok(chart)
}

/// Splits a curve's optional points into the runs of consecutive present ones, so
/// that a missing point breaks the line rather than being bridged.
fn runs(points: impl Iterator<Item = Option<(f64, f64)>>) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for p in points {
        match p {
            Some(p) => out.last_mut().expect("never empty").push(p),
            None if out.last().is_some_and(|r| !r.is_empty()) => out.push(Vec::new()),
            None => {}
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

/// Draws one run of a curve with its markers.
fn curve(
    panel: &mut Panel<'_, '_>,
    run: &[(f64, f64)],
    colour: RGBColor,
    shape: Shape,
    dashed: bool,
) -> Result<(), String> {
    let style = colour.stroke_width(2);
    // A lone point is its marker; a one-point polyline would draw nothing.
    if run.len() > 1 {
        if dashed {
            panel
                .draw_series(DashedLineSeries::new(
                    run.iter().copied(),
                    DASH.0,
                    DASH.1,
                    style,
                ))
                .map_err(err)?;
        } else {
            panel
                .draw_series(LineSeries::new(run.iter().copied(), style))
                .map_err(err)?;
        }
    }
    markers(panel.plotting_area(), run, shape, colour)
}

/// A legend entry: the wrapped name and how its line looks.
struct Entry {
    lines: Vec<String>,
    colour: RGBColor,
    shape: Shape,
    dashed: bool,
}

/// Draws the legend as a framed list at the top of `area`, which is a column of its
/// own beside the panels: inside a panel it would hide whatever lies under it.
fn legend(area: &Area<'_>, entries: &[Entry]) -> Result<(), String> {
    const LINE: i32 = 18;
    let (w, _) = area.dim_in_pixel();
    let (x0, y0, x1) = (4, 10, w as i32 - 12);
    let rows: i32 = entries.iter().map(|e| e.lines.len().max(1) as i32).sum();
    let y1 = y0 + 12 + rows * LINE + (entries.len() as i32 - 1) * 4;
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], WHITE.filled()))
        .map_err(err)?;
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], GREY.stroke_width(1)))
        .map_err(err)?;
    let mut y = y0 + 6 + LINE / 2;
    for e in entries {
        let sample = vec![(x0 + 10, y), (x0 + 42, y)];
        let style = e.colour.stroke_width(2);
        if e.dashed {
            area.draw(&plotters::element::DashedPathElement::new(
                sample, DASH.0, DASH.1, style,
            ))
            .map_err(err)?;
        } else {
            area.draw(&PathElement::new(sample, style)).map_err(err)?;
        }
        markers(area, &[(x0 + 26, y)], e.shape, e.colour)?;
        for line in &e.lines {
            area.draw(&Text::new(
                line.clone(),
                (x0 + 52, y),
                TextStyle::from(font(LEGEND_PX)).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
            y += LINE;
        }
        y += 4;
    }
    Ok(())
}

/// Renders a sweep chart; an error when it has no point to draw.
pub fn sweep_svg(chart: &SweepChart) -> Result<String, String> {
    // Points off the axes (NaN, infinite) are left out rather than drawn in a corner.
    let all = || {
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| p.offered_gbps.is_finite())
    };
    if all().next().is_none() {
        return Err(format!("{}: no measured point to draw", chart.title));
    }
    let x_max = top(all().map(|p| p.offered_gbps).fold(0.0, f64::max), 0.1);
    let cpu_max = top(
        all()
            .filter_map(|p| p.cpu_s_per_gb)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
        0.1,
    );
    let loss_max = top(
        all()
            .map(|p| p.loss_percent)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
        1.0,
    );

    // The floor is grey and dotted; the receivers take colours and shapes in turn.
    let mut looks = Vec::with_capacity(chart.series.len());
    let mut receivers = 0;
    for s in &chart.series {
        if s.floor {
            looks.push((GREY, Shape::Dot));
        } else {
            looks.push((
                COLOURS[receivers % COLOURS.len()],
                SHAPES[receivers % SHAPES.len()],
            ));
            receivers += 1;
        }
    }
    let longest = chart
        .series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    // Room for the sample line and the longest name, within bounds that leave the
    // panels most of the width; longer names wrap.
    let legend_w = ((longest as f64 * LEGEND_PX * 0.6).ceil() as u32 + 76).clamp(170, 320);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SWEEP_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let body = header(&root, &chart.title, &chart.subtitle)?;
        let (bw, bh) = body.dim_in_pixel();
        let (plots, side) = body.split_horizontally(bw - legend_w);
        // The upper panel has no x description, so a little less than half of the
        // height gives both plotting areas about the same size.
        let (upper, lower) = plots.split_vertically(bh * 48 / 100);
        let mut cpu = panel(&upper, x_max, cpu_max, "receiver CPU (s per GB)", None)?;
        let mut loss = panel(
            &lower,
            x_max,
            loss_max,
            "loss (%)",
            Some("offered rate (Gb/s)"),
        )?;
        // Floors first, so that the receivers' lines lie on top of them.
        let order = chart
            .series
            .iter()
            .zip(&looks)
            .filter(|(s, _)| s.floor)
            .chain(chart.series.iter().zip(&looks).filter(|(s, _)| !s.floor));
        for (s, &(colour, shape)) in order {
            let finite = |p: &&Point| p.offered_gbps.is_finite();
            let cpu_runs = runs(s.points.iter().filter(finite).map(|p| {
                p.cpu_s_per_gb
                    .filter(|v| v.is_finite())
                    .map(|v| (p.offered_gbps, v))
            }));
            let loss_runs = runs(s.points.iter().filter(finite).map(|p| {
                p.loss_percent
                    .is_finite()
                    .then_some((p.offered_gbps, p.loss_percent))
            }));
            for run in &cpu_runs {
                curve(&mut cpu, run, colour, shape, s.floor)?;
            }
            for run in &loss_runs {
                curve(&mut loss, run, colour, shape, s.floor)?;
            }
        }
        let max_chars = chars_fitting(legend_w - 72, LEGEND_PX);
        let entries: Vec<Entry> = chart
            .series
            .iter()
            .zip(&looks)
            .map(|(s, &(colour, shape))| Entry {
                lines: wrap(&s.name, max_chars),
                colour,
                shape,
                dashed: s.floor,
            })
            .collect();
        legend(&side, &entries)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Renders a bar chart; an error when it has no bar.
pub fn bars_svg(chart: &BarChart) -> Result<String, String> {
    if chart.bars.is_empty() {
        return Err(format!("{}: no bar to draw", chart.title));
    }
    // The highest thing drawn for a bar: its median or its range's top.
    let high = |b: &Bar| {
        let m = if b.median.is_finite() { b.median } else { 0.0 };
        b.range
            .map(|r| r.1)
            .filter(|v| v.is_finite())
            .map_or(m, |h| h.max(m))
    };
    let y_max = top(chart.bars.iter().map(high).fold(0.0, f64::max), 0.1);
    let n = chart.bars.len();
    let slot = (BARS_SIZE.0 - 100) / n as u32;
    let labels: Vec<Vec<String>> = chart
        .bars
        .iter()
        .map(|b| wrap(&b.label, chars_fitting(slot.saturating_sub(8), LABEL_PX)))
        .collect();
    let label_lines = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, BARS_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let body = header(&root, &chart.title, &chart.subtitle)?;
        let mut c = ChartBuilder::on(&body)
            .margin_top(14)
            .margin_right(16)
            .margin_left(8)
            .x_label_area_size(14 + 16 * label_lines)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
            .map_err(err)?;
        c.configure_mesh()
            .disable_x_mesh()
            .max_light_lines(0)
            .bold_line_style(GRID)
            // The labels are drawn below, wrapped, under each bar's middle.
            .x_labels(0)
            .label_style(font(TICK_PX))
            .axis_desc_style(font(DESC_PX))
            .y_desc(chart.unit.as_str())
            .draw()
            .map_err(err)?;
        let whisker = INK.stroke_width(2);
        for (i, b) in chart.bars.iter().enumerate() {
            let mid = i as f64 + 0.5;
            let colour = COLOURS[i % COLOURS.len()];
            if b.median.is_finite() {
                c.draw_series(std::iter::once(Rectangle::new(
                    [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, b.median)],
                    colour.mix(0.85).filled(),
                )))
                .map_err(err)?;
            }
            if let Some((lo, hi)) = b.range.filter(|r| r.0.is_finite() && r.1.is_finite()) {
                let cap = vec![(-8, 0), (8, 0)];
                let area = c.plotting_area();
                area.draw(&PathElement::new(vec![(mid, lo), (mid, hi)], whisker))
                    .map_err(err)?;
                area.draw(&(EmptyElement::at((mid, lo)) + PathElement::new(cap.clone(), whisker)))
                    .map_err(err)?;
                area.draw(&(EmptyElement::at((mid, hi)) + PathElement::new(cap, whisker)))
                    .map_err(err)?;
            }
            let value = if b.median.is_finite() {
                value_text(b.median)
            } else {
                "n/a".to_string()
            };
            c.draw_series(std::iter::once(
                EmptyElement::at((mid, high(b)))
                    + Text::new(
                        value,
                        (0, -6),
                        TextStyle::from(font(VALUE_PX)).pos(Pos::new(HPos::Center, VPos::Bottom)),
                    ),
            ))
            .map_err(err)?;
            let (x, y) = c.backend_coord(&(mid, 0.0));
            for (k, line) in labels[i].iter().enumerate() {
                root.draw(&Text::new(
                    line.clone(),
                    (x, y + 10 + 16 * k as i32),
                    TextStyle::from(font(LABEL_PX)).pos(Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Writes `svg` to `path`, refusing to follow a symlink there: charts are written
/// into directories others may write to, and a planted link must not redirect the
/// write onto another file.
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

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    /// Lines drawn in `c`: plotters writes one element a line.
    fn strokes(svg: &str, c: RGBColor) -> usize {
        let stroke = format!("stroke=\"{}\"", hex(c));
        svg.lines()
            .filter(|l| l.starts_with("<polyline") && l.contains(&stroke))
            .count()
    }

    /// Filled shapes of `kind` (`circle`, `polygon`) in `c`.
    fn filled(svg: &str, kind: &str, c: RGBColor) -> usize {
        let fill = format!("fill=\"{}\"", hex(c));
        svg.lines()
            .filter(|l| l.starts_with(&format!("<{kind} ")) && l.contains(&fill))
            .count()
    }

    fn pt(offered_gbps: f64, cpu_s_per_gb: Option<f64>, loss_percent: f64) -> Point {
        Point {
            offered_gbps,
            cpu_s_per_gb,
            loss_percent,
        }
    }

    fn series(name: &str, points: Vec<Point>, floor: bool) -> Series {
        Series {
            name: name.into(),
            points,
            floor,
        }
    }

    /// A floor, a receiver with every point and one (the second receiver: red
    /// squares) whose third point delivered nothing.
    fn sweep() -> SweepChart {
        let full = |c: f64| (1..=5).map(|r| pt(r as f64, Some(c), 0.0)).collect();
        let gap = (1..=5)
            .map(|r| pt(r as f64, (r != 3).then_some(2.0), r as f64 * 4.0))
            .collect();
        SweepChart {
            title: "bench udp: 1472-byte payloads".into(),
            subtitle: "test machine: firehose bench udp".into(),
            series: vec![
                series("floor: recvmmsg loop", full(0.5), true),
                series("fhudpsrc", full(0.7), false),
                series("udpsrc", gap, false),
            ],
        }
    }

    #[test]
    fn a_sweep_is_one_svg_document_with_every_text() {
        let svg = sweep_svg(&sweep()).unwrap();
        let t = svg.trim();
        assert!(t.starts_with("<svg") && t.ends_with("</svg>"), "{t}");
        assert_eq!(t.matches("<svg").count(), 1);
        for s in [
            "bench udp: 1472-byte payloads",
            "test machine: firehose bench udp",
            "floor: recvmmsg loop",
            "fhudpsrc",
            "udpsrc",
            "receiver CPU (s per GB)",
            "loss (%)",
        ] {
            assert!(svg.contains(s), "{s} missing");
        }
        // The panels share the x axis' description: only the lower one carries it.
        assert_eq!(svg.matches("offered rate (Gb/s)").count(), 1);
    }

    #[test]
    fn the_floor_is_dashed_and_the_receivers_solid() {
        let svg = sweep_svg(&sweep()).unwrap();
        // A receiver with every point: one line in each panel and the legend's sample.
        assert_eq!(strokes(&svg, COLOURS[0]), 3);
        // The floor's lines come as many short dashes, in grey.
        let dashes = strokes(&svg, GREY);
        assert!(dashes > 20, "{dashes} grey segments");
        // The same series, no longer a floor, takes a colour and a solid line.
        let mut chart = sweep();
        chart.series[0].floor = false;
        let svg = sweep_svg(&chart).unwrap();
        assert_eq!(strokes(&svg, GREY), 0);
        assert_eq!(strokes(&svg, COLOURS[0]), 3);
    }

    #[test]
    fn a_point_without_cpu_is_left_out_of_the_cpu_panel_only() {
        let svg = sweep_svg(&sweep()).unwrap();
        // The second receiver: 4 CPU markers, 5 loss markers and the legend's one.
        assert_eq!(filled(&svg, "polygon", COLOURS[1]), 4 + 5 + 1);
        // Its CPU line is broken where the point is missing (two pieces), not bridged.
        assert_eq!(strokes(&svg, COLOURS[1]), 2 + 1 + 1);
        // The first receiver's round markers: 5 in each panel and the legend's one.
        assert_eq!(filled(&svg, "circle", COLOURS[0]), 5 + 5 + 1);
    }

    #[test]
    fn a_single_point_and_an_empty_series_still_draw() {
        let chart = SweepChart {
            title: "one point".into(),
            subtitle: String::new(),
            series: vec![
                series("lone", vec![pt(3.0, Some(0.5), 0.0)], false),
                series("empty", vec![], false),
                series("no cpu", vec![pt(3.0, None, 2.0)], true),
            ],
        };
        let svg = sweep_svg(&chart).unwrap();
        for s in ["lone", "empty", "no cpu"] {
            assert!(svg.contains(s), "{s} missing");
        }
        // The lone point is one marker in each panel plus the legend's.
        assert_eq!(filled(&svg, "circle", COLOURS[0]), 3);
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        let mut c = sweep();
        for s in &mut c.series {
            s.points.clear();
        }
        assert!(sweep_svg(&c).unwrap_err().contains("no measured point"));
        c.series.clear();
        assert!(sweep_svg(&c).is_err());
        c.series
            .push(series("nan", vec![pt(f64::NAN, Some(1.0), 0.0)], false));
        assert!(sweep_svg(&c).is_err());
        let b = BarChart {
            title: "t".into(),
            subtitle: String::new(),
            unit: "GB/s".into(),
            bars: vec![],
        };
        assert!(bars_svg(&b).unwrap_err().contains("no bar"));
    }

    #[test]
    fn axes_leave_headroom_and_keep_a_minimum() {
        assert!((top(3.0, 1.0) - 3.3).abs() < 1e-9);
        assert_eq!(top(0.2, 1.0), 1.0);
        assert_eq!(top(0.0, 1.0), 1.0);
        assert_eq!(top(f64::NAN, 1.0), 1.0);
    }

    #[test]
    fn long_texts_wrap_at_spaces_and_cut_long_words() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefghij x", 4), ["abcd", "efgh", "ij x"]);
        assert!(wrap("  ", 4).is_empty());
    }

    #[test]
    fn bars_carry_labels_values_ranges_and_the_unit() {
        let long = "fhrecordsink format=raw io-depth=8 with a label far too long for its slot";
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
                Bar {
                    label: long.into(),
                    median: 123.4,
                    range: Some((120.0, 130.0)),
                },
                Bar {
                    label: "broken".into(),
                    median: f64::NAN,
                    range: None,
                },
            ],
        };
        let svg = bars_svg(&b).unwrap();
        for s in [
            "fio libaio",
            "fhrecordsink raw",
            "1.73",
            "1.67",
            "123",
            "n/a",
            "GB/s",
        ] {
            assert!(svg.contains(s), "{s} missing");
        }
        // The long label is wrapped onto lines of its own, none of it lost.
        assert!(!svg.contains(long));
        for word in long.split(' ') {
            assert!(svg.contains(word), "{word} missing");
        }
        // Each range is a stem and two caps; the bar without one has none.
        assert_eq!(strokes(&svg, INK), 2 * 3);
        // The bars with a value are drawn, the one without is not.
        for (i, want) in [1, 1, 1, 0].into_iter().enumerate() {
            assert_eq!(filled(&svg, "rect", COLOURS[i]), want, "bar {i}");
        }
    }

    #[test]
    fn write_svg_refuses_a_symlink_and_replaces_a_file() {
        let dir = std::env::temp_dir().join(format!("fh-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target.svg");
        let link = dir.join("link.svg");
        std::fs::write(&target, "keep").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write_svg(&link, "<svg/>").unwrap_err();
        assert!(e.contains(&link.display().to_string()), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // A plain file is replaced whole, not overwritten at its start.
        let ok = dir.join("ok.svg");
        std::fs::write(&ok, "a much longer old content").unwrap();
        write_svg(&ok, "<svg/>").unwrap();
        assert_eq!(std::fs::read_to_string(&ok).unwrap(), "<svg/>");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
