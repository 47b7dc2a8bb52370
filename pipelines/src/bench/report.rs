//! The one report writer of the rate sweeps: a markdown report (summary first, then
//! every step) and SVG charts of CPU per GB and loss against the offered rate.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::receiver::Receiver;
use super::spread::Spread;
use super::sweep::{opt3, Step, LOSSLESS};
use crate::plot;

/// What a report is about, beside its steps.
pub struct Report<'a> {
    /// `udp`, `spead`, `bypass` (with ` --gso` for that variant).
    pub bench: String,
    /// Set-up lines (command, host, sender, receivers, notes), each a bullet.
    pub setup: Vec<String>,
    /// Every step, in the order run.
    pub steps: &'a [Step],
    /// The receivers, in the report's order.
    pub receivers: &'a [Receiver],
    /// The peer every ratio is taken against (`udpsrc`, `spead2`, `fhudpsrc`).
    pub baseline: Option<Receiver>,
    /// Show the whole machine's CPU beside the receiver's (bypass receivers on a veth).
    pub host_cpu: bool,
    /// The CPU budget every receiver was held to: cores, and how it was imposed.
    pub budget: Option<(f64, String)>,
    /// Why the run stopped early.
    pub failure: Option<&'a str>,
}

/// The median of `v`; `None` when empty.
pub fn median(v: Vec<f64>) -> Option<f64> {
    Spread::of(&v).map(|s| s.median)
}

/// A median with its range, as "1.23 (1.10–1.40)"; "-" for no values.
fn spread(v: &[f64], digits: usize) -> String {
    Spread::of(v).map_or("-".into(), |s| s.text(digits))
}

/// The step with the highest asked rate up to which every step was lossless, or `None`
/// if the lowest already lost. The first loss ends the climb: a lucky lossless step
/// above a lossy one does not count, because a capture must keep up at every rate below
/// the one quoted.
pub fn highest_sustained<'s>(steps: impl IntoIterator<Item = &'s Step>) -> Option<&'s Step> {
    let mut v: Vec<&Step> = steps.into_iter().collect();
    v.sort_by_key(|s| s.asked);
    v.into_iter().take_while(|s| s.lossless()).last()
}

/// Figures of one receiver at one size, over the repeats.
struct Figures {
    /// Highest lossless offered rate of each repeat (Gb/s); a repeat with none gives 0.
    best: Vec<f64>,
    /// Lossless at its highest offered rate in every repeat: `best` is a lower bound.
    capped: bool,
    /// CPU s/GB at the common rate, per repeat.
    cpu: Vec<(u32, f64)>,
    /// Host CPU s/GB at the common rate, per repeat.
    host: Vec<f64>,
}

impl Report<'_> {
    fn repeats(&self) -> u32 {
        self.steps.iter().map(|s| s.repeat + 1).max().unwrap_or(0)
    }

    fn sizes(&self) -> Vec<u32> {
        let mut v: Vec<u32> = Vec::new();
        for s in self.steps {
            if !v.contains(&s.size) {
                v.push(s.size);
            }
        }
        v
    }

    fn of(&self, size: u32, rx: Receiver) -> Vec<&Step> {
        self.steps
            .iter()
            .filter(|s| s.size == size && s.receiver == rx)
            .collect()
    }

    /// The highest asked rate at which every receiver was lossless in every repeat, or
    /// else the lowest asked rate (`false`: lossy there).
    fn common_rate(&self, size: u32) -> Option<(u64, bool)> {
        let at: Vec<&Step> = self.steps.iter().filter(|s| s.size == size).collect();
        let mut rates: Vec<u64> = at.iter().map(|s| s.asked).collect();
        rates.sort_unstable();
        rates.dedup();
        rates
            .iter()
            .rev()
            .find(|&&r| at.iter().filter(|s| s.asked == r).all(|s| s.lossless()))
            .map(|&r| (r, true))
            .or_else(|| rates.first().map(|&r| (r, false)))
    }

    fn figures(&self, size: u32, rx: Receiver, common: Option<u64>) -> Figures {
        let mine = self.of(size, rx);
        let mut f = Figures {
            best: Vec::new(),
            capped: !mine.is_empty(),
            cpu: Vec::new(),
            host: Vec::new(),
        };
        for r in 0..self.repeats() {
            let run: Vec<&Step> = mine.iter().copied().filter(|s| s.repeat == r).collect();
            if run.is_empty() {
                continue;
            }
            f.best.push(
                highest_sustained(run.iter().copied()).map_or(0.0, |s| s.offered_bps() / 1e9),
            );
            f.capped &= run
                .iter()
                .max_by_key(|s| s.asked)
                .is_some_and(|s| s.lossless());
            if let Some(s) = run.iter().find(|s| Some(s.asked) == common) {
                if let Some(c) = s.cpu_per_gb() {
                    f.cpu.push((r, c));
                }
                if let Some(h) = s.host_cpu_per_gb() {
                    f.host.push(h);
                }
            }
        }
        f
    }

    /// Per-repeat ratios of `a`'s CPU to `b`'s (paired by repeat).
    fn ratios(a: &Figures, b: &Figures) -> Vec<f64> {
        a.cpu
            .iter()
            .filter_map(|(r, x)| {
                b.cpu
                    .iter()
                    .find(|(rb, _)| rb == r)
                    .filter(|(_, y)| *y > 0.0)
                    .map(|(_, y)| x / y)
            })
            .collect()
    }

    /// The markdown report.
    pub fn markdown(&self) -> String {
        let mut r = String::new();
        let _ = writeln!(
            r,
            "## firehose bench {} — {}\n",
            self.bench,
            crate::sys::utc_now()
        );
        for line in &self.setup {
            // Lines indented by two spaces are sub-items of the line before.
            match line.strip_prefix("  ") {
                Some(sub) => writeln!(r, "  - {sub}"),
                None => writeln!(r, "- {line}"),
            }
            .expect("writing to a String");
        }
        let _ = writeln!(
            r,
            "- loss = 1 − received/sent units (heaps for SPEAD receivers, datagrams for the \
             others); lossless = loss < {} %; highest lossless = the highest offered rate \
             with every lower step lossless too (≥ when even the top step was); CPU = the \
             receiver process's user+sys over the same window for every receiver (from the \
             sender's start until its count stops moving), per GB (1e9 bytes) delivered; \
             figures are the median of {} run(s), the range in brackets; ratios are taken \
             run by run at the common rate (the highest rate every receiver kept up with in \
             every run) and their median given; kernel drops = datagrams the kernel dropped \
             at the receiver's own socket (/proc/net/udp; the host's UDP InErrors where it \
             was not listed); datagrams per receive = datagrams ÷ the receive calls that \
             brought any (spead2's own `batches`)",
            LOSSLESS * 100.0,
            self.repeats()
        );
        if self.host_cpu {
            let _ = writeln!(
                r,
                "- host CPU = the whole machine's busy CPU (/proc/stat) per GB delivered: \
                 sender, receiver and softirq packet work. On a veth much of the kernel \
                 path's receive work runs in softirq on the sender's CPU, charged to the \
                 sender or to no process, so only the whole machine's CPU compares kernel \
                 and bypass receivers fairly; the sender's share is the same for all"
            );
        }
        if let Some((_, how)) = &self.budget {
            let _ = writeln!(
                r,
                "- CPU budget: {how}; compare the highest \
                 lossless rates (a receiver using its whole budget shows CPU s/GB ≈ budget ÷ \
                 rate, so read CPU per GB in a run without a budget); throttled periods = \
                 the share of the budget's quota periods that ended with the receiver held \
                 back (cgroup cpu.stat)"
            );
        }
        r.push('\n');
        if let Some(f) = self.failure {
            let _ = writeln!(r, "**Incomplete: {}**\n", f.replace('\n', " "));
        }
        r.push_str(&self.summary());
        r.push('\n');
        r.push_str(&self.step_table());
        r
    }

    fn summary(&self) -> String {
        let mut r = String::new();
        // A ratio column for each floor that ran: the blocking one (a wake-up per call)
        // and the batching one (what a capture that naps and batches can at best pay).
        let floors: Vec<Receiver> = [Receiver::Floor, Receiver::BatchFloor]
            .into_iter()
            .filter(|f| self.receivers.contains(f))
            .collect();
        let mut head = String::from(
            "| payload | receiver | highest lossless Gb/s | CPU s/GB at common rate |",
        );
        let mut rule = String::from("|---:|---|---:|---:|");
        if self.host_cpu {
            head.push_str(" host CPU s/GB |");
            rule.push_str("---:|");
        }
        if let Some(b) = self.baseline {
            head.push_str(&format!(" CPU vs {} |", b.name()));
            rule.push_str("---:|");
        }
        for f in &floors {
            head.push_str(&format!(" CPU vs {} |", f.name()));
            rule.push_str("---:|");
        }
        if self.budget.is_some() {
            head.push_str(" lossless Gb/s per budget core |");
            rule.push_str("---:|");
        }
        let _ = writeln!(r, "{head}\n{rule}");
        for size in self.sizes() {
            let common = self.common_rate(size);
            let note = match common {
                Some((rate, true)) => format!(" at {:.2} Gb/s", rate as f64 / 1e9),
                Some((rate, false)) => format!(" at {:.2} Gb/s (lossy)", rate as f64 / 1e9),
                None => String::new(),
            };
            let all: Vec<(Receiver, Figures)> = self
                .receivers
                .iter()
                .filter(|&&rx| !self.of(size, rx).is_empty())
                .map(|&rx| (rx, self.figures(size, rx, common.map(|c| c.0))))
                .collect();
            let find = |want: Option<Receiver>| {
                all.iter().find(|(rx, _)| Some(*rx) == want).map(|(_, f)| f)
            };
            let base = find(self.baseline);
            for (rx, f) in &all {
                let cpu: Vec<f64> = f.cpu.iter().map(|c| c.1).collect();
                let best = if f.best.iter().all(|&b| b == 0.0) {
                    "none".to_string()
                } else {
                    format!("{}{}", if f.capped { "≥ " } else { "" }, spread(&f.best, 2))
                };
                let cpu_text = if cpu.is_empty() {
                    "-".to_string()
                } else {
                    format!("{}{note}", spread(&cpu, 3))
                };
                let mut row = format!("| {size} B | {} | {best} | {cpu_text} |", rx.name());
                if self.host_cpu {
                    let _ = write!(row, " {} |", spread(&f.host, 3));
                }
                let ratio = |other: Option<&Figures>, me_is_it: bool| -> String {
                    match other {
                        _ if me_is_it => "1".into(),
                        Some(o) => {
                            let v = Self::ratios(f, o);
                            if v.is_empty() {
                                "-".into()
                            } else {
                                format!("{}×", spread(&v, 2))
                            }
                        }
                        None => "-".into(),
                    }
                };
                if self.baseline.is_some() {
                    let _ = write!(row, " {} |", ratio(base, Some(*rx) == self.baseline));
                }
                for &fl in &floors {
                    let _ = write!(row, " {} |", ratio(find(Some(fl)), *rx == fl));
                }
                if let Some((b, _)) = self.budget {
                    let per: Vec<f64> = f.best.iter().map(|x| x / b).collect();
                    let _ = write!(
                        row,
                        " {}{} |",
                        if f.capped { "≥ " } else { "" },
                        spread(&per, 2)
                    );
                }
                let _ = writeln!(r, "{row}");
            }
        }
        r
    }

    fn step_table(&self) -> String {
        let mut r = String::new();
        let mut head = format!("| {} |", Step::FIGURES.join(" | "));
        let mut rule =
            String::from("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        if self.host_cpu {
            head.push_str(" host CPU s/GB |");
            rule.push_str("---:|");
        }
        let _ = writeln!(r, "{head}\n{rule}");
        for s in self.steps {
            let _ = write!(r, "| {} |", s.figures().join(" | "));
            if self.host_cpu {
                let _ = write!(r, " {} |", opt3(s.host_cpu_per_gb()));
            }
            r.push('\n');
        }
        r
    }

    /// One chart per payload size: each receiver's median CPU per GB and loss at each
    /// asked rate, against the median offered rate; the blocking floor as a dashed line
    /// (the batching floor takes a colour of its own, so that the two stay apart).
    pub fn charts(&self, subtitle: &str) -> Vec<(u32, plot::SweepChart)> {
        let mut out = Vec::new();
        for size in self.sizes() {
            let mut series = Vec::new();
            for &rx in self.receivers {
                let mine = self.of(size, rx);
                let mut rates: Vec<u64> = mine.iter().map(|s| s.asked).collect();
                rates.sort_unstable();
                rates.dedup();
                let points: Vec<plot::Point> = rates
                    .iter()
                    .map(|&rate| {
                        let at: Vec<&&Step> = mine.iter().filter(|s| s.asked == rate).collect();
                        let m = |f: &dyn Fn(&Step) -> Option<f64>| {
                            median(at.iter().filter_map(|s| f(s)).collect())
                        };
                        plot::Point {
                            offered_gbps: m(&|s| Some(s.offered_bps() / 1e9)).unwrap_or(0.0),
                            cpu_s_per_gb: m(&|s| s.cpu_per_gb()),
                            loss_percent: m(&|s| Some(s.loss() * 100.0)).unwrap_or(0.0),
                        }
                    })
                    .collect();
                if !points.is_empty() {
                    series.push(plot::Series {
                        name: match rx {
                            Receiver::Floor => "floor: recvmmsg loop".into(),
                            Receiver::BatchFloor => "batch-floor: batching recvmmsg loop".into(),
                            _ => rx.name().into(),
                        },
                        points,
                        floor: rx == Receiver::Floor,
                    });
                }
            }
            out.push((
                size,
                plot::SweepChart {
                    title: format!("firehose bench {}: {size}-byte payloads", self.bench),
                    subtitle: subtitle.to_string(),
                    series,
                },
            ));
        }
        out
    }
}

/// Where the chart of `size` goes when the plot path is `base` (`x.svg` → `x-1472.svg`
/// when there are several sizes).
pub fn chart_path(base: &Path, size: u32, several: bool) -> PathBuf {
    if !several {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bench".into());
    base.with_file_name(format!("{stem}-{size}.svg"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::sweep::tests::step;

    const G: u64 = 1_000_000_000;

    fn report(steps: &[Step]) -> String {
        Report {
            bench: "udp".into(),
            setup: vec!["command: `x`".into()],
            steps,
            receivers: &[Receiver::Floor, Receiver::Udpsrc, Receiver::Fhudpsrc],
            baseline: Some(Receiver::Udpsrc),
            host_cpu: true,
            budget: Some((0.5, "0.5 of one core per receiver process".into())),
            failure: None,
        }
        .markdown()
    }

    #[test]
    fn spreads_of_no_value() {
        assert_eq!(median(vec![]), None);
        assert_eq!(spread(&[], 2), "-");
    }

    #[test]
    fn summary_takes_paired_ratios_at_the_common_rate() {
        let mut steps = Vec::new();
        for r in 0..3 {
            // floor 0.1, udpsrc 0.4, fhudpsrc 0.2 (0.3 in the third run) CPU s at 1 G;
            // at 2 G udpsrc loses, so 1 G is the common rate.
            let fh = if r == 2 { 0.3 } else { 0.2 };
            steps.push(step(Receiver::Floor, r, G, 1000, 1000, 0.1));
            steps.push(step(Receiver::Udpsrc, r, G, 1000, 1000, 0.4));
            steps.push(step(Receiver::Fhudpsrc, r, G, 1000, 1000, fh));
            steps.push(step(Receiver::Floor, r, 2 * G, 2000, 2000, 0.2));
            steps.push(step(Receiver::Udpsrc, r, 2 * G, 2000, 1500, 0.8));
            steps.push(step(Receiver::Fhudpsrc, r, 2 * G, 2000, 2000, 0.4));
        }
        let md = report(&steps);
        // udpsrc: best 1 G (sent 1000 × 1472 B in 1 s = 0.01 Gb/s offered, in fact).
        let udpsrc = md
            .lines()
            .find(|l| l.starts_with("| 1472 B | udpsrc |"))
            .unwrap();
        assert!(udpsrc.contains("| 1 | 4.00× |"), "{md}");
        let fh = md
            .lines()
            .find(|l| l.starts_with("| 1472 B | fhudpsrc |"))
            .unwrap();
        // Paired ratios 0.5, 0.5, 0.75 → median 0.5; against the floor 2, 2, 3 → 2.
        assert!(
            fh.contains("| 0.50 (0.50–0.75)× | 2.00 (2.00–3.00)× |"),
            "{fh}"
        );
        assert!(
            fh.contains("| ≥ "),
            "fhudpsrc never lost: a lower bound\n{fh}"
        );
        assert!(fh.contains("at 1.00 Gb/s"), "{fh}");
        // Every step is in the table, with its run number.
        let rows = md
            .lines()
            .filter(|l| l.starts_with("| 3 | 1472 B |"))
            .count();
        assert_eq!(rows, 6, "{md}");
    }

    #[test]
    fn each_floor_that_ran_has_its_ratio_column() {
        // floor 0.2, batch-floor 0.1, fhudpsrc 0.15 CPU s at 1 G in both runs.
        let mut steps = Vec::new();
        for r in 0..2 {
            steps.push(step(Receiver::Floor, r, G, 1000, 1000, 0.2));
            steps.push(step(Receiver::BatchFloor, r, G, 1000, 1000, 0.1));
            steps.push(step(Receiver::Fhudpsrc, r, G, 1000, 1000, 0.15));
        }
        let receivers = [Receiver::Floor, Receiver::BatchFloor, Receiver::Fhudpsrc];
        let report = |receivers| Report {
            bench: "udp".into(),
            setup: vec![],
            steps: &steps,
            receivers,
            baseline: None,
            host_cpu: false,
            budget: None,
            failure: None,
        };
        let md = report(&receivers).markdown();
        assert!(
            md.contains("| CPU s/GB at common rate | CPU vs floor | CPU vs batch-floor |\n"),
            "{md}"
        );
        let row = |rx: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| 1472 B | {rx} |")))
                .unwrap()
                .to_string()
        };
        assert!(row("fhudpsrc").ends_with("| 0.75× | 1.50× |"), "{md}");
        assert!(row("floor").ends_with("| 1 | 2.00× |"), "{md}");
        assert!(row("batch-floor").ends_with("| 0.50× | 1 |"), "{md}");
        // Without the batching floor, no column for it.
        let md = report(&[Receiver::Floor, Receiver::Fhudpsrc]).markdown();
        assert!(!md.contains("CPU vs batch-floor"), "{md}");
        assert!(md.contains("| CPU vs floor |\n"), "{md}");
        // Both floors on the chart, told apart: only the blocking one is dashed grey.
        let charts = report(&receivers).charts("t");
        let c = &charts[0].1;
        assert_eq!(c.series.len(), 3);
        assert!(c.series[0].floor && !c.series[1].floor && !c.series[2].floor);
        assert!(
            c.series[1].name.starts_with("batch-floor"),
            "{:?}",
            c.series[1].name
        );
    }

    #[test]
    fn a_receiver_that_loses_at_the_lowest_rate_has_no_best() {
        let steps = vec![
            step(Receiver::Udpsrc, 0, G, 1000, 900, 0.4),
            step(Receiver::Fhudpsrc, 0, G, 1000, 1000, 0.2),
        ];
        let md = report(&steps);
        assert!(md.contains("| 1472 B | udpsrc | none |"), "{md}");
        assert!(md.contains("(lossy)"), "{md}");
    }

    #[test]
    fn charts_have_one_series_per_receiver_and_a_floor() {
        let steps = vec![
            step(Receiver::Floor, 0, G, 1000, 1000, 0.1),
            step(Receiver::Udpsrc, 0, G, 1000, 1000, 0.4),
        ];
        let r = Report {
            bench: "udp".into(),
            setup: vec![],
            steps: &steps,
            receivers: &[Receiver::Floor, Receiver::Udpsrc],
            baseline: Some(Receiver::Udpsrc),
            host_cpu: false,
            budget: None,
            failure: None,
        };
        let charts = r.charts("test");
        assert_eq!(charts.len(), 1);
        let c = &charts[0].1;
        assert_eq!(c.series.len(), 2);
        assert!(c.series[0].floor && !c.series[1].floor);
        assert_eq!(
            c.series[1].points[0].cpu_s_per_gb.map(|x| x.round()),
            Some(272.0)
        );
        assert_eq!(
            chart_path(Path::new("/t/x.svg"), 1472, true),
            PathBuf::from("/t/x-1472.svg")
        );
    }
}
