//! The server's URL may hold a password (`redis://user:password@host/`, or
//! `?pass=` / `?password=` in the query). echomq-web shows the URL with each
//! such secret as `***`, and passes every text it shows (a response, a log
//! line) through [`Redactor::scrub`], which also removes the secrets wherever
//! else they appear, raw or percent-decoded: whatever a client library puts
//! in an error, the password does not leave the process.

/// What replaces a secret.
pub const MASK: &str = "***";

/// The secrets of one URL and how to hide them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redactor {
    url: String,
    shown: String,
    /// Longest first, so a secret that contains another is masked whole.
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(url: &str) -> Redactor {
        let (shown, raw) = redact_url(url);
        let mut secrets: Vec<String> = Vec::new();
        for s in raw {
            for v in [percent_decode(&s), s] {
                if !v.is_empty() && !secrets.contains(&v) {
                    secrets.push(v);
                }
            }
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor {
            url: url.to_string(),
            shown,
            secrets,
        }
    }

    /// The URL with its secrets masked.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// `text` with the URL replaced by its masked form and every secret by
    /// `***`.
    pub fn scrub(&self, text: &str) -> String {
        if self.secrets.is_empty() {
            return text.to_string();
        }
        let mut out = text.replace(&self.url, &self.shown);
        for s in &self.secrets {
            out = out.replace(s.as_str(), MASK);
        }
        out
    }
}

/// `url` with the password of its userinfo and the values of its `pass` and
/// `password` query parameters masked, and those secrets as written.
/// Works on any text, parsed or not: a URL the client refuses is still shown
/// masked in the refusal.
fn redact_url(url: &str) -> (String, Vec<String>) {
    let mut secrets = Vec::new();
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    // The authority ends at the first `/`, `?` or `#`; its userinfo at the
    // last `@` in it (a password may hold an unencoded `@`).
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, password)) => {
                    secrets.push(password.to_string());
                    format!("{user}:{MASK}{host}")
                }
                None => authority.to_string(),
            }
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, v)) if k == "pass" || k == "password" => {
                        secrets.push(v.to_string());
                        format!("{k}={MASK}")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            let mut t = format!("{path}?{}", pairs.join("&"));
            if let Some(f) = fragment {
                t.push('#');
                t.push_str(f);
            }
            t
        }
        None => tail.to_string(),
    };
    (format!("{scheme}{authority}{tail}"), secrets)
}

/// `%XX` escapes decoded (as the client decodes a password); `+` kept.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_the_userinfo_are_masked() {
        let r = Redactor::new("redis://alice:s3cretpw@127.0.0.1:55099/");
        assert_eq!(r.shown(), "redis://alice:***@127.0.0.1:55099/");
        let r = Redactor::new("rediss://:pw@h:1/2");
        assert_eq!(r.shown(), "rediss://:***@h:1/2");
        // An `@` inside the password: the userinfo ends at the last one.
        let r = Redactor::new("redis://u:p@ss@h/");
        assert_eq!(r.shown(), "redis://u:***@h/");
        // No password: nothing to hide.
        for plain in ["redis://h:1/", "redis://alice@h/", "redis://127.0.0.1:6379"] {
            assert_eq!(Redactor::new(plain).shown(), plain);
            assert_eq!(Redactor::new(plain).scrub("x h y"), "x h y");
        }
    }

    #[test]
    fn query_passwords_are_masked() {
        let r = Redactor::new("redis+unix:///run/v.sock?db=1&pass=hunter2&user=u#f");
        assert_eq!(r.shown(), "redis+unix:///run/v.sock?db=1&pass=***&user=u#f");
        let r = Redactor::new("unix:///s?password=a%2Fb");
        assert_eq!(r.shown(), "unix:///s?password=***");
        assert_eq!(r.scrub("sent a/b and a%2Fb"), "sent *** and ***");
    }

    #[test]
    fn every_text_is_scrubbed_raw_and_decoded() {
        let url = "redis://alice:s3cr%40t@127.0.0.1:1/";
        let r = Redactor::new(url);
        assert_eq!(r.shown(), "redis://alice:***@127.0.0.1:1/");
        assert_eq!(
            r.scrub(&format!("{url}: refused (AUTH alice s3cr@t)")),
            "redis://alice:***@127.0.0.1:1/: refused (AUTH alice ***)"
        );
        assert_eq!(r.scrub("raw s3cr%40t"), "raw ***");
        // Not a URL at all: the part before `@` after a `:` is still a password.
        let r = Redactor::new("alice:pw@host");
        assert_eq!(r.shown(), "alice:***@host");
        assert!(!r.scrub("bad url alice:pw@host").contains("pw"));
    }

    #[test]
    fn percent_escapes() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("%"), "%");
    }
}
