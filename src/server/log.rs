//! The server log. Every line the module writes goes through `RedisModule_Log`
//! with the constant format `"%s"`, so a `%` in a key name is printed, never
//! read as a conversion. Names are quoted with `quote`, which escapes them,
//! and the whole line's control characters are escaped once more when it is
//! written: a NUL byte can neither cut a line short nor fail a C-string
//! conversion (which would panic inside the SDK's own logging helper and
//! abort the server), a newline cannot forge a second line, and invalid
//! UTF-8 shows as escapes.

use std::ffi::CString;

use redis_module::{raw, Context};

/// A quoted name longer than this many bytes is cut, with its length said,
/// so a line names a 64 KB key recognisably and still fits the server's
/// line limit with the reason that follows it.
const MAX_QUOTED_BYTES: usize = 200;

/// Writes one `warning` line. Put every name a client chose through `quote`.
pub fn warning(ctx: &Context, line: &str) {
    write(ctx, c"warning", line);
}

/// Writes one `notice` line (the server's default log level shows it).
pub fn notice(ctx: &Context, line: &str) {
    write(ctx, c"notice", line);
}

fn write(ctx: &Context, level: &std::ffi::CStr, line: &str) {
    // The escaped line holds no NUL byte, so the conversion cannot fail; were
    // it to, the line is dropped rather than the server.
    let Ok(text) = CString::new(escape_controls(line.as_bytes(), false)) else {
        return;
    };
    // SAFETY: a pointer set once at load (checked by `missing_api`); a live
    // context; a constant format whose one `%s` is matched by one C string.
    if let Some(log) = unsafe { raw::RedisModule_Log } {
        unsafe { log(ctx.ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
    }
}

/// `bytes` as one printable line: printable ASCII and valid non-control
/// UTF-8 kept, a backslash doubled, `\n` `\r` `\t` as such, any other
/// control byte, NUL included, and any byte of invalid UTF-8 as `\xNN`.
pub fn escape(bytes: &[u8]) -> String {
    escape_controls(bytes, true)
}

/// As `escape`, doubling backslashes only when asked: a line built of quoted
/// names is escaped once more for its controls alone, so a name's escapes
/// stay readable.
fn escape_controls(bytes: &[u8], double_backslash: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' if double_backslash => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => {
                    let mut buffer = [0u8; 4];
                    for b in c.encode_utf8(&mut buffer).bytes() {
                        push_hex(&mut out, b);
                    }
                }
                c => out.push(c),
            }
        }
        for &b in chunk.invalid() {
            push_hex(&mut out, b);
        }
    }
    out
}

/// A client's name for a log line: in single quotes, at most
/// `MAX_QUOTED_BYTES` of it, and its length when cut. Escaped by `warning`.
pub fn quote(name: &[u8]) -> String {
    let shown = name.get(..MAX_QUOTED_BYTES).unwrap_or(name);
    // A cut inside a UTF-8 sequence shows as escapes.
    let mut out = String::from("'");
    out.push_str(&escape(shown));
    out.push('\'');
    if shown.len() < name.len() {
        out.push_str(&format!("...({} bytes)", name.len()));
    }
    out
}

fn push_hex(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\x");
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 15)]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_bytes_become_one_printable_line() {
        for (bytes, want) in [
            (&b"{50%sale}:pending"[..], "{50%sale}:pending"),
            (b"%s%s%n", "%s%s%n"),
            (b"a\0b", "a\\x00b"),
            (b"a\nb\r\t", "a\\nb\\r\\t"),
            (b"\x1b[31m\x7f", "\\x1b[31m\\x7f"),
            (b"\xff\xfe ok", "\\xff\\xfe ok"),
            (b"back\\slash", "back\\\\slash"),
            ("caf\u{e9} \u{100}".as_bytes(), "caf\u{e9} \u{100}"),
            ("\u{85}".as_bytes(), "\\xc2\\x85"),
            (b"", ""),
        ] {
            let got = escape(bytes);
            assert_eq!(got, want, "{bytes:?}");
            assert!(!got.bytes().any(|b| b < 0x20 || b == 0x7f), "{got:?}");
        }
    }

    #[test]
    fn long_names_are_cut_with_their_length() {
        let name = vec![b'k'; 65_536];
        let quoted = quote(&name);
        assert!(quoted.starts_with(&format!("'{}'", "k".repeat(MAX_QUOTED_BYTES))));
        assert!(quoted.ends_with("...(65536 bytes)"), "{quoted}");
        assert_eq!(quote(b"a%n\0"), "'a%n\\x00'");
        // A cut inside a multi-byte character shows its first bytes escaped.
        let mut split = vec![b'x'; MAX_QUOTED_BYTES - 1];
        split.extend_from_slice("\u{e9}".as_bytes());
        assert!(quote(&split).contains("\\xc3'...("), "{}", quote(&split));
    }

    #[test]
    fn a_line_of_quoted_names_is_escaped_once() {
        let line = format!("skips {} and {}\n", quote(b"a\\b\0"), "x%sy");
        assert_eq!(
            escape_controls(line.as_bytes(), false),
            "skips 'a\\\\b\\x00' and x%sy\\n"
        );
    }
}
