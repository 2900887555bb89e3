//! The memo's layout, checked in a real headless browser (issue 24): a passing and a failing
//! memo, at a desktop (1280 × 800) and a phone (390 × 844) viewport, must not overflow
//! sideways (wide tables scroll inside their own container), must show the decision on the
//! first screen, and must fit the paper when printed. Debian's chromium does the layout
//! (`apt-get install chromium`; `.ci/run` installs it); without one the tests say
//! `SKIPPED` on stderr and pass.
//!
//! The first screens are committed as PNGs under `tests/expectations/screenshots/`, the
//! layout record a reviewer looks at. Fonts make them differ from machine to machine, so
//! they are written only with `SPARSEGATE_UPDATE_SCREENSHOTS=1`; the assertions are the
//! measurements, never pixel equality.

use crate::cdp::{Browser, find_chromium};
use crate::support::{Sandbox, repo_file};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The memos measured: name, pack under `tests/packs/valid/`, the gate's exit code.
/// The memos checked: name, pack (from the repository root), the exit codes it may give.
/// The quickstart is the README's own command (issue 24's "done when"); on a loaded
/// machine its blocking speedup may come out undecided, so exit 3 is allowed there.
const MEMOS: [(&str, &str, &[i32]); 3] = [
    ("pass", "tests/packs/valid/layout-pass.yaml", &[0]),
    ("fail", "tests/packs/valid/layout-fail.yaml", &[1]),
    ("quickstart", "scenarios/quickstart.yaml", &[0, 3]),
];

/// A screen the memo is read on: name, CSS pixels, emulated as a phone.
struct Screen {
    name: &'static str,
    width: u32,
    height: u32,
    phone: bool,
}

const SCREENS: [Screen; 2] = [
    Screen {
        name: "1280",
        width: 1280,
        height: 800,
        phone: false,
    },
    Screen {
        name: "390",
        width: 390,
        height: 844,
        phone: true,
    },
];

/// The printable width of an A4 page with Chromium's default 1 cm margins, in CSS pixels
/// (190 mm at 96 px per inch).
const PAPER_WIDTH: u32 = 718;

/// The elements of the first screen: the decision must be there; who must act and the
/// rollback trigger's state too, when the memo has them.
/// Issue 24: the call, who must act (only when something failed) and the trigger state.
const FIRST_SCREEN: [(&str, bool); 3] = [("decision", true), ("act", false), ("rollback", true)];

/// What the browser measured: (memo, screen or `print`) → the report of `layout.js`.
struct Layouts {
    reports: Vec<(String, String, Value)>,
}

/// Gate both packs and measure their memos once for every test of this file; `None`
/// without a chromium.
fn layouts() -> Option<&'static Layouts> {
    static LAYOUTS: OnceLock<Option<Layouts>> = OnceLock::new();
    let layouts = LAYOUTS.get_or_init(|| {
        let exe = find_chromium()?;
        Some(measure(&exe))
    });
    if layouts.is_none() {
        eprintln!(
            "SKIPPED: chromium not found (set SPARSEGATE_CHROMIUM or `apt-get install -y chromium`): \
             the memo's layout was not checked in a browser (issue 24)"
        );
    }
    layouts.as_ref()
}

fn measure(exe: &std::path::Path) -> Layouts {
    let script = include_str!("layout.js");
    let mut browser = Browser::launch(exe).unwrap_or_else(|e| panic!("chromium: {e}"));
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let update = updating_screenshots();
    let mut reports = Vec::new();
    for (name, pack, exits) in MEMOS {
        let sb = Sandbox::new();
        let file = pack.rsplit('/').next().unwrap_or(pack);
        sb.write_raw(file, &std::fs::read_to_string(repo_file(pack)).unwrap());
        let out = sb.gate(file, &["-q"]);
        assert!(
            out.status.code().is_some_and(|c| exits.contains(&c)),
            "{name}: exit {:?}, expected one of {exits:?}",
            out.status.code()
        );
        let memo = sb.path().join("out/memo.html");
        let mut measured = |browser: &mut Browser, screen: &str, paper: bool| {
            let report = browser
                .eval(&format!("({script})({paper})"))
                .unwrap_or_else(|e| panic!("{name} at {screen}: {e}"));
            let report: Value = serde_json::from_str(report.as_str().expect("a JSON string")).unwrap();
            eprintln!("{name} memo at {screen}: {report}");
            reports.push((name.to_owned(), screen.to_owned(), report));
        };
        for screen in &SCREENS {
            browser
                .open(&memo, screen.width, screen.height, screen.phone)
                .unwrap_or_else(|e| panic!("{name} at {}: {e}", screen.name));
            let png = browser.screenshot().unwrap_or_else(|e| panic!("screenshot: {e}"));
            let file = format!("{name}-{}.png", screen.name);
            std::fs::write(shots.join(&file), &png).unwrap();
            if update {
                std::fs::write(repo_file(&format!("tests/expectations/screenshots/{file}")), &png).unwrap();
            }
            measured(&mut browser, screen.name, false);
        }
        browser.emulate_media(Some("print")).unwrap();
        browser.open(&memo, PAPER_WIDTH, 1000, false).unwrap();
        measured(&mut browser, "print", true);
        browser.emulate_media(None).unwrap();
    }
    eprintln!("screenshots of this run: {}", shots.display());
    Layouts { reports }
}

/// `SPARSEGATE_UPDATE_SCREENSHOTS=1`: write the first screens to the committed record.
fn updating_screenshots() -> bool {
    std::env::var_os("SPARSEGATE_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1")
}

/// Every measurement that breaks `rule`, one line each, with what stuck out.
fn broken(layouts: &Layouts, screens: &[&str], rule: impl Fn(&Value) -> Option<String>) -> Vec<String> {
    layouts
        .reports
        .iter()
        .filter(|(_, screen, _)| screens.contains(&screen.as_str()))
        .filter_map(|(memo, screen, r)| rule(r).map(|why| format!("{memo} memo at {screen}: {why}")))
        .collect()
}

fn overflow(r: &Value) -> Option<String> {
    let sideways = r["scroll_width"].as_f64() > r["client_width"].as_f64();
    (sideways || r["overflowing"] != 0).then(|| {
        format!(
            "the page is {} px wide in a {} px viewport; {} element(s) stick out by up to {} px: {}",
            r["scroll_width"], r["client_width"], r["overflowing"], r["worst_px"], r["offenders"]
        )
    })
}

#[test]
fn the_memo_does_not_overflow_sideways_at_1280_or_390_px() {
    let Some(layouts) = layouts() else { return };
    let problems = broken(layouts, &["1280", "390"], overflow);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The viewport really was the size asked for (`--window-size` would not give that; a
    // phone zooms out, `innerWidth` grows, when the page overflows).
    for (memo, screen, r) in &layouts.reports {
        if let Some(s) = SCREENS.iter().find(|s| s.name == screen) {
            assert_eq!(r["inner_width"], s.width, "{memo} at {screen}: {r}");
            assert_eq!(r["client_width"], s.width, "{memo} at {screen}: {r}");
        }
    }
}

#[test]
fn the_printed_memo_fits_the_paper() {
    let Some(layouts) = layouts() else { return };
    let problems = broken(layouts, &["print"], |r| {
        let folded = (r["folded_hidden"] != 0).then(|| {
            format!(
                "{} element(s) folded in a <details> do not print",
                r["folded_hidden"]
            )
        });
        let why: Vec<String> = overflow(r).into_iter().chain(folded).collect();
        (!why.is_empty()).then(|| why.join("; "))
    });
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_first_screen_shows_the_decision_who_must_act_and_the_rollback_trigger() {
    let Some(layouts) = layouts() else { return };
    let problems = broken(layouts, &["1280", "390"], |r| {
        let fold = r["inner_height"].as_f64().unwrap();
        let mut why = Vec::new();
        for (id, required) in FIRST_SCREEN {
            match r["first_screen"][id]["bottom"].as_f64() {
                Some(bottom) if bottom > fold => why.push(format!(
                    "#{id} ends at {bottom:.0} px, below the first screen ({fold} px)"
                )),
                None if required => why.push(format!("there is no #{id}")),
                _ => {}
            }
        }
        (!why.is_empty()).then(|| why.join("; "))
    });
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_committed_screenshots_are_first_screens_of_both_memos_at_both_widths() {
    if updating_screenshots() {
        layouts(); // writes them first
    }
    for (memo, _, _) in MEMOS {
        for screen in &SCREENS {
            let file = repo_file(&format!(
                "tests/expectations/screenshots/{memo}-{}.png",
                screen.name
            ));
            let png = std::fs::read(&file).unwrap_or_else(|e| {
                panic!(
                    "{file}: {e} (SPARSEGATE_UPDATE_SCREENSHOTS=1 cargo test --release --test cli browser)"
                )
            });
            assert_eq!(&png[1..4], b"PNG", "{file}");
            let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
            assert_eq!((size(16), size(20)), (screen.width, screen.height), "{file}");
        }
    }
}
