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
    hidden: String,
    /// Longest first, so a secret that contains another is masked whole.
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(url: &str) -> Redactor {
        let (shown, hidden, raw) = redact_url(url);
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
            hidden,
            secrets,
        }
    }

    /// The URL with its secrets masked.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The URL with its whole userinfo (the user too) masked: how a URL that
    /// does not parse is shown, since what is user and what is password is
    /// then only a guess.
    pub fn without_userinfo(&self) -> &str {
        &self.hidden
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
/// `password` query parameters masked, the same with the whole userinfo
/// masked, and the secrets as written.
///
/// Works on any text, parsed or not: a URL the client refuses is still shown
/// masked in the refusal. A password may hold any character, also those that
/// end an authority (`/`, `?`, `#`) or a userinfo (`@`), so the userinfo is
/// everything after `scheme://` up to the *last* `@`, wherever that `@` is,
/// and its password all of it after the first `:`. An `@` in the path or the
/// query of a URL with a `:` before it makes more masked than needed (the
/// host shown may be a piece of the query), never less. The reading of a
/// parser (the authority ends at the first `/`, `?` or `#`) is taken too,
/// and the secrets of both are masked.
fn redact_url(url: &str) -> (String, String, Vec<String>) {
    let mut secrets = Vec::new();
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    // A parser's reading: the authority ends at the first `/`, `?` or `#`.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if let Some(at) = authority.rfind('@') {
        if let Some((_, password)) = authority[..at].split_once(':') {
            secrets.push(password.to_string());
        }
    }
    let (tail, found) = mask_query(tail);
    secrets.extend(found);
    let Some(at) = rest.rfind('@') else {
        let shown = format!("{scheme}{authority}{tail}");
        return (shown.clone(), shown, secrets);
    };
    // The userinfo ends at the last `@`, whatever comes before it.
    let (userinfo, host) = rest.split_at(at);
    let (host, found) = mask_query(host);
    secrets.extend(found);
    let hidden = format!("{scheme}{MASK}{host}");
    let shown = match userinfo.split_once(':') {
        Some((user, password)) => {
            secrets.push(password.to_string());
            format!("{scheme}{user}:{MASK}{host}")
        }
        // No password in the userinfo, so none of the `@`s (if the last
        // one is in the path or the query) hides one.
        None => format!("{scheme}{authority}{tail}"),
    };
    (shown, hidden, secrets)
}

/// `tail` (from the end of the authority on) with the values of its `pass`
/// and `password` query parameters masked, and those values.
fn mask_query(tail: &str) -> (String, Vec<String>) {
    let Some((path, query)) = tail.split_once('?') else {
        return (tail.to_string(), Vec::new());
    };
    let mut secrets = Vec::new();
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
    (t, secrets)
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

    /// Passwords that hold what ends an authority or a userinfo: the URL
    /// shown, the URL shown without its userinfo, and the password in
    /// neither (nor any 4-character piece of it that the rest of the URL
    /// does not hold).
    #[test]
    fn hostile_passwords_table() {
        let table: &[(&str, &str, &str, &str)] = &[
            // (url, password, shown, without userinfo)
            (
                "redis://default:Hk4#Lm8@127.0.0.1:6379/",
                "Hk4#Lm8",
                "redis://default:***@127.0.0.1:6379/",
                "redis://***@127.0.0.1:6379/",
            ),
            (
                "redis://default:Pq/Rs7@127.0.0.1:6379/2",
                "Pq/Rs7",
                "redis://default:***@127.0.0.1:6379/2",
                "redis://***@127.0.0.1:6379/2",
            ),
            (
                "redis://u:Tv?Wx=9@h:1/",
                "Tv?Wx=9",
                "redis://u:***@h:1/",
                "redis://***@h:1/",
            ),
            (
                "rediss://u:Ab@Cd@Ef@h:1/",
                "Ab@Cd@Ef",
                "rediss://u:***@h:1/",
                "rediss://***@h:1/",
            ),
            (
                "redis://u:Gh%zz 5 Jk@h:1/",
                "Gh%zz 5 Jk",
                "redis://u:***@h:1/",
                "redis://***@h:1/",
            ),
            (
                "redis://u:1234#5678@h:1/",
                "1234#5678",
                "redis://u:***@h:1/",
                "redis://***@h:1/",
            ),
            (
                "redis://u:No:Pe#/?@Qr@h:1/?db=1",
                "No:Pe#/?@Qr",
                "redis://u:***@h:1/?db=1",
                "redis://***@h:1/?db=1",
            ),
            // A parser would take `Zy` as the password and `Xw#V@u` as a
            // fragment: both masked.
            (
                "redis://u:Zy@Xw#V@h:1/",
                "Zy@Xw#V",
                "redis://u:***@h:1/",
                "redis://***@h:1/",
            ),
            // No scheme at all.
            ("u:St#Uv@h", "St#Uv", "u:***@h", "***@h"),
            // With a query password as well.
            (
                "redis://u:Ij#Kl@h:1/?pass=Mn0p",
                "Ij#Kl",
                "redis://u:***@h:1/?pass=***",
                "redis://***@h:1/?pass=***",
            ),
        ];
        let long: String = (0..40).map(|i| format!("Zq{i:02}x")).collect();
        let long = format!("#{long}/?@ %");
        let long_url = format!("redis://default:{long}@127.0.0.1:6379/");
        let mut rows: Vec<(String, String, String, String)> = table
            .iter()
            .map(|(u, p, s, h)| (u.to_string(), p.to_string(), s.to_string(), h.to_string()))
            .collect();
        rows.push((
            long_url,
            long,
            "redis://default:***@127.0.0.1:6379/".into(),
            "redis://***@127.0.0.1:6379/".into(),
        ));
        for (url, password, shown, hidden) in rows {
            let r = Redactor::new(&url);
            assert_eq!(r.shown(), shown, "{url}");
            assert_eq!(r.without_userinfo(), hidden, "{url}");
            let rest = url.replacen(&password, "", 1);
            let error = r.scrub(&format!("{url}: refused ({password}, {})", url.len()));
            let chars: Vec<char> = password.chars().collect();
            for text in [r.shown(), r.without_userinfo(), &error] {
                for piece in chars.windows(4) {
                    let piece: String = piece.iter().collect();
                    assert!(
                        rest.contains(&piece) || !text.contains(&piece),
                        "{url}: '{piece}' of the password in {text}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_at_sign_after_the_host_hides_no_password() {
        // No `:` before the last `@`: nothing is a password, the query's is masked.
        let r = Redactor::new("redis+unix:///run/v@1.sock?pass=a@b");
        assert_eq!(r.shown(), "redis+unix:///run/v@1.sock?pass=***");
        assert_eq!(r.scrub("AUTH a@b"), "AUTH ***");
        // A `:` before it: more is masked than needed, never less.
        let r = Redactor::new("redis://u:pw@h:1/?pass=a@b");
        assert_eq!(r.shown(), "redis://u:***@b");
        assert_eq!(r.scrub("pw and a@b"), "*** and ***");
    }

    #[test]
    fn percent_escapes() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("%"), "%");
    }
}
