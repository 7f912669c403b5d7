//! A PostgreSQL password, in every form it can reach the runner, kept out of messages and out of
//! the log: the URL's userinfo (`postgres://USER:PASSWORD@HOST/DB`), the URL's `password=`
//! parameter (`postgres://USER@HOST/DB?password=PASSWORD`), and `$PGPASSWORD` (which the runner
//! honours, as libpq does, when the URL carries no password).
//!
//! * [`redact`]: the URL for messages, each password replaced by `***`.
//! * [`without_password`]: the URL for storing (a task records its world's URL): no password.
//! * [`scrub`]: any text that came from elsewhere (the driver's and the server's words), with
//!   every password this process has seen ([`remember`], called by `connect`) replaced by `***`.

use std::sync::Mutex;

/// What replaces a password in a message.
pub const MASK: &str = "***";

/// Shortest password [`scrub`] replaces in free text: a shorter one would turn ordinary words of a
/// message into `***` (the URLs in messages are redacted by their structure, whatever its length).
pub const MIN_SCRUBBED_LEN: usize = 4;

/// The passwords this process has seen (URLs it connected with, `$PGPASSWORD`).
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The byte range of the userinfo password in `url` (after `USER:`, before `@`), if any.
fn userinfo_password(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    // the authority ends at the first '/', '?' or '#'; its userinfo at its last '@'
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..end].rfind('@')?;
    let colon = rest[..at].find(':')?;
    Some((start + colon + 1, start + at))
}

/// The byte ranges of every `password=` parameter value in `url`'s query.
fn param_passwords(url: &str) -> Vec<(usize, usize)> {
    let Some(q) = url.find('?') else { return Vec::new() };
    let query_end = url[q..].find('#').map_or(url.len(), |h| q + h);
    let mut out = Vec::new();
    let mut pos = q + 1;
    while pos <= query_end {
        let end = url[pos..query_end].find('&').map_or(query_end, |a| pos + a);
        let pair = &url[pos..end];
        if let Some((k, _)) = pair.split_once('=')
            && k.eq_ignore_ascii_case("password")
        {
            out.push((pos + k.len() + 1, end));
        }
        pos = end + 1;
    }
    out
}

/// `url` with every password replaced by [`MASK`], for messages.
pub fn redact(url: &str) -> String {
    let mut ranges = param_passwords(url);
    ranges.extend(userinfo_password(url));
    ranges.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut at = 0;
    for (a, b) in ranges {
        if a < at {
            continue;
        }
        out.push_str(&url[at..a]);
        out.push_str(MASK);
        at = b;
    }
    out.push_str(&url[at..]);
    out
}

/// `url` without its passwords (the userinfo's `:PASSWORD` and every `password=` parameter), for
/// storing.
pub fn without_password(url: &str) -> String {
    let mut s = match userinfo_password(url) {
        Some((a, b)) => format!("{}{}", &url[..a - 1], &url[b..]),
        None => url.to_string(),
    };
    let Some(q) = s.find('?') else { return s };
    let (query, frag) = match s[q + 1..].find('#') {
        Some(h) => (s[q + 1..q + 1 + h].to_string(), s[q + 1 + h..].to_string()),
        None => (s[q + 1..].to_string(), String::new()),
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.split_once('=').is_some_and(|(k, _)| k.eq_ignore_ascii_case("password")))
        .filter(|p| !p.is_empty())
        .collect();
    s.truncate(q);
    if !kept.is_empty() {
        s.push('?');
        s.push_str(&kept.join("&"));
    }
    s.push_str(&frag);
    s
}

/// Every password form `url` carries, raw and percent-decoded.
fn passwords_in(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (a, b) in param_passwords(url).into_iter().chain(userinfo_password(url)) {
        let raw = &url[a..b];
        out.push(raw.to_string());
        out.push(percent_decode(raw));
    }
    out
}

/// `%XX` decoded (bytes that do not form UTF-8 are kept as they were).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (b.get(i + 1).and_then(|c| hex(*c)), b.get(i + 2).and_then(|c| hex(*c)))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// Remembers the passwords of `url` and `$PGPASSWORD`, so that [`scrub`] removes them from any
/// text this process prints.
pub fn remember(url: &str) {
    let mut found = passwords_in(url);
    if let Ok(p) = std::env::var("PGPASSWORD") {
        found.push(p);
    }
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for p in found {
        if p.len() >= MIN_SCRUBBED_LEN && !seen.contains(&p) {
            seen.push(p);
        }
    }
}

/// `text` with every password seen so far ([`remember`]) replaced by [`MASK`].
pub fn scrub(text: &str) -> String {
    let seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = text.to_string();
    // longest first: a password that contains another is replaced whole
    let mut ps: Vec<&String> = seen.iter().collect();
    ps.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in ps {
        if out.contains(p.as_str()) {
            out = out.replace(p.as_str(), MASK);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_is_masked_and_none_is_stored() {
        assert_eq!(redact("postgres://u:pw@h:5/d"), "postgres://u:***@h:5/d");
        assert_eq!(without_password("postgres://u:pw@h:5/d"), "postgres://u@h:5/d");
        assert_eq!(redact("postgres://u@h/d?password=S3cr3t"), "postgres://u@h/d?password=***");
        assert_eq!(without_password("postgres://u@h/d?password=S3cr3t"), "postgres://u@h/d");
        assert_eq!(
            redact("postgres://u@h/d?sslmode=disable&PASSWORD=S3cr3t&connect_timeout=2"),
            "postgres://u@h/d?sslmode=disable&PASSWORD=***&connect_timeout=2"
        );
        assert_eq!(
            without_password("postgres://u:a@h/d?sslmode=disable&password=b&connect_timeout=2"),
            "postgres://u@h/d?sslmode=disable&connect_timeout=2"
        );
        assert_eq!(redact("postgres://u:a@h/d?password=b"), "postgres://u:***@h/d?password=***");
        // an '@' in the query is not the userinfo's
        assert_eq!(redact("postgres://h/d?x=a@b"), "postgres://h/d?x=a@b");
        assert_eq!(without_password("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(without_password("not a url"), "not a url");
        assert_eq!(percent_decode("p%40ss%2Fw"), "p@ss/w");
        assert_eq!(passwords_in("postgres://u:p%40ss@h/d"), vec!["p%40ss".to_string(), "p@ss".to_string()]);
    }

    #[test]
    fn scrub_replaces_what_was_seen() {
        remember("postgres://u:Zq9-secret-pw@h/d?password=Other-Secret");
        let s = scrub("FATAL: password Zq9-secret-pw rejected, and Other-Secret too");
        assert!(!s.contains("Zq9-secret-pw") && !s.contains("Other-Secret"), "{s}");
        assert_eq!(scrub("nothing here"), "nothing here");
    }
}
