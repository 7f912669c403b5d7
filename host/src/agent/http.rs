//! `[[tool]] kind = "http"`: a tool behind an HTTP endpoint.
//!
//! **The request.** `method` to `url`, with `{name}` in the URL replaced by the argument `name`
//! (a string or a number, percent-encoded); for every method but `GET` the body is the call's
//! arguments, the exact canonical JSON bytes its intent recorded (the same bytes on every attempt,
//! since servers compare a retried request's payload with the first). Headers:
//!
//! * `Idempotency-Key: "<key>"` for an idempotent tool: the key as a structured-field string
//!   (quoted), as draft-ietf-httpapi-idempotency-key-header (-06/-07) specifies; a server that
//!   takes the raw value (Stripe) dedupes on it just the same, quotes included. 32 hex digits
//!   derived from (task, step, tool, arguments) (`brokerlab_core::runner::idempotency_key`).
//! * `Brokerlab-Fence: <task>/<epoch>` on every call: the fencing token.
//! * `Brokerlab-Call: <task>/<step>`: which step of which task, for the server's records.
//! * `Authorization: Bearer <token>` when `bearer_env` names a variable.
//!
//! **What a server must do** (docs/RUNNER.md, "Real tools"): with `Idempotency-Key`, apply a key
//! once and answer a repeat with the first answer; answer 409 while a request with that key is
//! still in progress, and 422 to a key reused with another payload. With `Brokerlab-Fence`, keep
//! per task the highest epoch seen and refuse a lower one without acting, answering a non-2xx
//! status with the header `Brokerlab-Fence-Highest: <highest>` (the in-repo server uses 409).
//!
//! **The answer, by status class** ([`classify`]): 2xx the result; a refusal carrying
//! `Brokerlab-Fence-Highest`: fenced (this runner lost its lease); 429 and 408: not done, again
//! after the `Retry-After` (bounded); 409 to a keyed request: in progress, again with the same
//! key; 422 to a keyed request: the key stands for another request, review; any other 4xx
//! (and 409/422 without a key): the tool's own refusal, recorded as a failed result; 5xx, a
//! timeout or a connection lost once the request was sent: outcome unknown (the class rule). A
//! connection never made (refused, no such host, TLS failed) did not reach the tool: tried again,
//! then recorded as "not sent".

use brokerlab_core::runner::ToolClass;

use super::openai::{agent, retry_after_ms};
use super::tool::{Fence, Tool, ToolReply, ToolRequest};
use crate::task::secret;
use crate::task::spec::{HttpSpec, placeholders};

/// The fencing token header.
pub const FENCE_HEADER: &str = "Brokerlab-Fence";
/// The header a server's fence refusal carries: the highest token it has seen for the task.
pub const FENCE_HIGHEST_HEADER: &str = "Brokerlab-Fence-Highest";
/// The idempotency key header (the IETF draft's and Stripe's).
pub const KEY_HEADER: &str = "Idempotency-Key";
/// The header naming the call's task and step.
pub const CALL_HEADER: &str = "Brokerlab-Call";

/// A tool behind an HTTP endpoint.
pub struct HttpTool {
    spec: HttpSpec,
    agent: ureq::Agent,
    token: Option<String>,
}

impl std::fmt::Debug for HttpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTool").field("method", &self.spec.method).field("url", &self.spec.url).finish()
    }
}

/// The characters a URL's path segment or query value keeps as they are (RFC 3986 unreserved).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `url` with each `{name}` replaced by argument `name`, percent-encoded.
pub fn fill_url(url: &str, args: &serde_json::Value) -> Result<String, String> {
    let mut out = url.to_string();
    for name in placeholders(url)? {
        let v = match args.get(&name) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => v.to_string(),
            Some(_) => return Err(format!("argument {name:?} for the URL must be a string or a number")),
            None => return Err(format!("argument {name:?} for the URL is missing")),
        };
        out = out.replace(&format!("{{{name}}}"), &percent_encode(&v));
    }
    Ok(out)
}

/// What a status and its headers mean for a call (see the module doc); `keyed`: the request
/// carried an `Idempotency-Key`.
pub fn classify(status: u16, headers: &ureq::http::HeaderMap, body: &str, keyed: bool) -> ToolReply {
    let words = || {
        let b = body.trim();
        if b.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {b}") }
    };
    if (200..300).contains(&status) {
        return ToolReply::Done(body.to_string());
    }
    if let Some(h) = headers.get(FENCE_HIGHEST_HEADER).and_then(|v| v.to_str().ok()).and_then(|s| s.trim().parse().ok())
    {
        return ToolReply::Fenced { highest: h };
    }
    match status {
        429 | 408 => ToolReply::RateLimited { retry_after_ms: retry_after_ms(headers) },
        409 if keyed => ToolReply::InProgress { retry_after_ms: retry_after_ms(headers) },
        422 if keyed => ToolReply::KeyConflict(words()),
        300..=499 => ToolReply::Refused(words()),
        _ => ToolReply::Unknown(words()),
    }
}

/// Whether a client error means the request never reached the server (safe to send again).
fn not_sent(e: &ureq::Error) -> bool {
    use std::io::ErrorKind;
    match e {
        ureq::Error::Io(io) => matches!(io.kind(), ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable),
        ureq::Error::Timeout(t) => matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve),
        ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::BadUri(_)
        | ureq::Error::Http(_)
        | ureq::Error::InvalidProxyUrl
        | ureq::Error::Tls(_)
        | ureq::Error::Rustls(_) => true,
        _ => false,
    }
}

impl HttpTool {
    /// A tool for `spec`; a `bearer_env` that is not set is refused (naming the variable).
    pub fn new(name: &str, spec: &HttpSpec) -> Result<HttpTool, String> {
        let token = match &spec.bearer_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(t) if !t.trim().is_empty() => {
                    secret::remember_secret(t.trim());
                    Some(t.trim().to_string())
                }
                _ => {
                    return Err(format!(
                        "tool {name}: bearer_env: the environment variable {var} is not set (or empty)"
                    ));
                }
            },
        };
        let p = spec.patience;
        Ok(HttpTool { spec: spec.clone(), agent: agent(p.timeout_ms, p.connect_timeout_ms), token })
    }

    fn send(
        &self,
        method: &str,
        url: &str,
        body: Option<&str>,
        headers: &[(&str, String)],
    ) -> Result<(u16, ureq::http::HeaderMap, String), ureq::Error> {
        let mut b = ureq::http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        if let Some(t) = &self.token {
            b = b.header("Authorization", format!("Bearer {t}"));
        }
        let bytes = body.unwrap_or("").as_bytes().to_vec();
        if body.is_some() {
            b = b.header("Content-Type", "application/json");
        }
        let rq = b.body(bytes).map_err(ureq::Error::Http)?;
        let mut resp = self.agent.run(rq)?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text =
            resp.body_mut().with_config().limit(super::defaults::MAX_BODY_BYTES).lossy_utf8(true).read_to_string()?;
        Ok((status, headers, text))
    }
}

impl Tool for HttpTool {
    fn call(&mut self, req: &ToolRequest<'_>) -> ToolReply {
        let args: serde_json::Value = match serde_json::from_str(req.arguments) {
            Ok(v) => v,
            Err(e) => return ToolReply::Refused(format!("not sent: the arguments are not JSON: {e}")),
        };
        let url = match fill_url(&self.spec.url, &args) {
            Ok(u) => u,
            Err(e) => return ToolReply::Refused(format!("not sent: {e}")),
        };
        let mut headers =
            vec![(FENCE_HEADER, req.fence.to_string()), (CALL_HEADER, format!("{}/{}", req.task, req.step))];
        let keyed = req.class == ToolClass::Idempotent && req.key.is_some();
        if let Some(k) = req.key.filter(|_| keyed) {
            headers.push((KEY_HEADER, format!("\"{k}\"")));
        }
        let body = (self.spec.method != "GET").then_some(req.arguments);
        match self.send(&self.spec.method, &url, body, &headers) {
            Ok((status, h, text)) => classify(status, &h, &text, keyed),
            Err(e) if not_sent(&e) => ToolReply::Unreachable(format!("{url}: {}", secret::scrub(&e.to_string()))),
            Err(e) => ToolReply::Unknown(format!("{url}: {}", secret::scrub(&e.to_string()))),
        }
    }

    fn checks_fence(&self) -> bool {
        self.spec.checks_fence
    }

    fn raise_fence(&mut self, fence: Fence<'_>) -> Result<(), String> {
        let Some(url) = self.spec.fence_url.clone() else { return Ok(()) };
        // raising a fence is idempotent (the server keeps the highest epoch), so a server that
        // is restarting or busy is asked again, with the tool's retries and backoff
        let p = self.spec.patience;
        let salt = super::jitter::salt(&[fence.task.as_bytes(), b"fence"]);
        let mut attempt = 0;
        loop {
            let why = match self.send("POST", &url, None, &[(FENCE_HEADER, fence.to_string())]) {
                Ok((s, _, _)) if (200..300).contains(&s) => return Ok(()),
                Ok((s, _, text)) if s == 408 || s == 429 || s >= 500 => format!("HTTP {s}: {}", text.trim()),
                Ok((s, _, text)) => {
                    return Err(format!("{url}: raising the fence to {fence}: HTTP {s}: {}", text.trim()));
                }
                Err(e) => secret::scrub(&e.to_string()),
            };
            if attempt >= p.retries {
                return Err(format!("{url}: raising the fence to {fence}: {why} ({} attempts)", attempt + 1));
            }
            std::thread::sleep(std::time::Duration::from_millis(p.pause_ms(attempt, salt ^ u64::from(attempt), None)));
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_replies() {
        let mut h = ureq::http::HeaderMap::new();
        assert_eq!(classify(200, &h, "ok", true), ToolReply::Done("ok".into()));
        assert!(matches!(classify(400, &h, "bad", true), ToolReply::Refused(_)));
        assert!(matches!(classify(409, &h, "", true), ToolReply::InProgress { .. }));
        assert!(matches!(classify(409, &h, "", false), ToolReply::Refused(_)));
        assert!(matches!(classify(422, &h, "", true), ToolReply::KeyConflict(_)));
        assert!(matches!(classify(422, &h, "", false), ToolReply::Refused(_)));
        assert!(matches!(classify(500, &h, "", true), ToolReply::Unknown(_)));
        assert!(matches!(classify(503, &h, "", false), ToolReply::Unknown(_)));
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(classify(429, &h, "", false), ToolReply::RateLimited { retry_after_ms: Some(2000) });
        h.insert(FENCE_HIGHEST_HEADER, "7".parse().unwrap());
        assert_eq!(classify(409, &h, "", true), ToolReply::Fenced { highest: 7 });
        assert_eq!(
            fill_url("http://h/o/{id}?x={n}", &serde_json::json!({"id": "a b/c", "n": 3})).unwrap(),
            "http://h/o/a%20b%2Fc?x=3"
        );
        assert!(fill_url("http://h/{id}", &serde_json::json!({})).is_err());
    }
}
