//! Just enough of the Chrome DevTools protocol to load a page in headless chromium at a
//! given viewport, run a script in it and take a screenshot (issue 24's layout checks).
//!
//! Why the protocol and not `chromium --dump-dom --window-size=390,844`: measured with
//! Debian's chromium 148, `--window-size` sets the *window*, and headless mode clamps it,
//! so the page saw `innerWidth` 500 and `innerHeight` 705 at `--window-size=390,844`
//! (1280 × 661 at `1280,800`): a 390 px check would have run at 500 px. Only
//! `--screenshot` applies the size to the viewport. `Emulation.setDeviceMetricsOverride`
//! sets the viewport exactly, for the measurements and the screenshots alike.
//!
//! The browser speaks over `--remote-debugging-pipe` (it reads NUL-terminated JSON
//! messages on fd 3 and writes them on fd 4): `sh` moves our stdin and stdout there, so
//! no websocket client, no chromedriver and no unsafe fd juggling are needed.

use base64::Engine;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// How long one protocol answer may take before the test gives up on the browser.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The flags this machine's closed network needs (`.library` machine notes): no sandbox
/// as root, no GPU, no background connections that would be refused, a fresh profile.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
];

/// The chromium to use: `$SPARSEGATE_CHROMIUM`, else the first of the usual names on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(exe) = std::env::var_os("SPARSEGATE_CHROMIUM") {
        return Some(PathBuf::from(exe));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser", "google-chrome"].map(|name| dir.join(name)))
        .find(|p| p.is_file())
}

/// A headless chromium with one page attached.
pub struct Browser {
    child: Child,
    to_browser: ChildStdin,
    from_browser: Receiver<Value>,
    /// Messages read while waiting for another (events, mostly).
    pending: VecDeque<Value>,
    next_id: u64,
    session: String,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Start `exe` with a fresh profile and open one blank page.
    pub fn launch(exe: &Path) -> Result<Browser, String> {
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let log = std::fs::File::create(profile.path().join("stderr.log")).map_err(|e| e.to_string())?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(exe)
            .args(FLAGS)
            .arg(format!(
                "--user-data-dir={}",
                profile.path().join("profile").display()
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let to_browser = child.stdin.take().expect("piped stdin");
        let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
        let (tx, from_browser) = channel();
        std::thread::spawn(move || {
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                message.pop_if(|b| *b == 0);
                if let Ok(value) = serde_json::from_slice(&message)
                    && tx.send(value).is_err()
                {
                    break;
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            to_browser,
            from_browser,
            pending: VecDeque::new(),
            next_id: 0,
            session: String::new(),
            profile,
        };
        let target = browser.call_on(None, "Target.createTarget", json!({"url": "about:blank"}))?;
        let target = target["targetId"].clone();
        let attached = browser.call_on(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        )?;
        browser.session = attached["sessionId"]
            .as_str()
            .ok_or("attachToTarget gave no session")?
            .to_owned();
        browser.call("Page.enable", json!({}))?;
        Ok(browser)
    }

    /// Give the page a `width` × `height` CSS-pixel viewport (`mobile`: the meta viewport
    /// applies and scrollbars overlay, as on a phone) and load `file` in it.
    pub fn open(&mut self, file: &Path, width: u32, height: u32, mobile: bool) -> Result<(), String> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        )?;
        self.pending.clear();
        self.call(
            "Page.navigate",
            json!({"url": format!("file://{}", file.display())}),
        )?;
        self.wait_for("Page.loadEventFired")
    }

    /// Emulate `print` media (or the screen again, with `None`).
    pub fn emulate_media(&mut self, media: Option<&str>) -> Result<(), String> {
        self.call(
            "Emulation.setEmulatedMedia",
            json!({"media": media.unwrap_or("")}),
        )
        .map(drop)
    }

    /// The value of the JavaScript `expression` in the page.
    pub fn eval(&mut self, expression: &str) -> Result<Value, String> {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        )?;
        if let Some(e) = answer.get("exceptionDetails") {
            return Err(format!("the script threw: {e}"));
        }
        Ok(answer["result"]["value"].clone())
    }

    /// A PNG of the viewport (the first screen).
    pub fn screenshot(&mut self) -> Result<Vec<u8>, String> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}))?;
        let data = shot["data"].as_str().ok_or("no screenshot data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| e.to_string())
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let session = self.session.clone();
        self.call_on(Some(&session), method, params)
    }

    fn call_on(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).map_err(|e| e.to_string())?;
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .and_then(|()| self.to_browser.flush())
            .map_err(|e| format!("{method}: the browser went away ({e}){}", self.log_tail()))?;
        loop {
            let reply = self.receive(method)?;
            if reply["id"] == id {
                return match reply.get("error") {
                    Some(error) => Err(format!("{method}: {error}")),
                    None => Ok(reply["result"].clone()),
                };
            }
            self.pending.push_back(reply);
        }
    }

    fn wait_for(&mut self, event: &str) -> Result<(), String> {
        if let Some(i) = self.pending.iter().position(|m| m["method"] == event) {
            self.pending.remove(i);
            return Ok(());
        }
        loop {
            if self.receive(event)?["method"] == event {
                return Ok(());
            }
        }
    }

    fn receive(&mut self, waiting_for: &str) -> Result<Value, String> {
        self.from_browser
            .recv_timeout(ANSWER_TIMEOUT)
            .map_err(|e| match e {
                RecvTimeoutError::Timeout => format!("no answer to {waiting_for} in {ANSWER_TIMEOUT:?}"),
                RecvTimeoutError::Disconnected => {
                    format!(
                        "the browser closed while waiting for {waiting_for}{}",
                        self.log_tail()
                    )
                }
            })
    }

    /// The end of what the browser printed, to explain why it stopped.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.profile.path().join("stderr.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("; its stderr ends:\n{}", tail.join("\n"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call_on(None, "Browser.close", json!({}));
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
