//! A trace line's fields (`name -> raw JSON text`) and their conversions, each with a message
//! that names the field.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

pub use crate::fleet::input::trace::twice_message;

/// A line's fields: name -> raw JSON text. Unknown fields are kept and ignored by the formats.
pub type Fields<'a> = BTreeMap<String, &'a RawValue>;

/// Splits a line into its fields; `example` is shown when the line is not a JSON object. A field
/// given twice is an error (serde would keep the last one silently; other JSON readers keep the
/// first).
pub fn fields<'a>(line: &'a str, example: &str) -> Result<Fields<'a>, String> {
    use serde::de::DeserializeSeed as _;
    let mut twice = None;
    let mut de = serde_json::Deserializer::from_str(line);
    FieldsSeed { twice: &mut twice }.deserialize(&mut de).and_then(|f| de.end().map(|()| f)).map_err(|e| {
        if let Some(name) = twice.take() {
            return twice_message(&name);
        }
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        format!("column {}: expected a JSON object like {example}: {msg}", e.column())
    })
}

/// A line's fields, each name once; a repeated name goes to `twice`.
struct FieldsSeed<'t> {
    twice: &'t mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for FieldsSeed<'_> {
    type Value = Fields<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Fields<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FieldsSeed<'_> {
    type Value = Fields<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
        let mut out = Fields::new();
        while let Some(name) = map.next_key::<String>()? {
            let v: &'de RawValue = map.next_value()?;
            if out.contains_key(&name) {
                *self.twice = Some(name);
                return Err(serde::de::Error::custom("a field given twice"));
            }
            out.insert(name, v);
        }
        Ok(out)
    }
}

/// A present, non-null field's raw text.
fn raw<'a>(f: &Fields<'a>, name: &str, expected: &str) -> Result<&'a str, String> {
    match f.get(name).map(|r| r.get()) {
        None => Err(format!("missing field `{name}`: expected {expected}")),
        Some("null") => Err(format!("field `{name}` is null: expected {expected}")),
        Some(t) => Ok(t),
    }
}

/// A non-negative integer field.
pub fn u64_field(f: &Fields<'_>, name: &str, expected: &str) -> Result<u64, String> {
    let t = raw(f, name, expected)?;
    serde_json::from_str::<u64>(t).map_err(|_| format!("field `{name}`: expected {expected}, got {t}"))
}

/// An integer field (may be negative).
pub fn i64_field(f: &Fields<'_>, name: &str, expected: &str) -> Result<i64, String> {
    let t = raw(f, name, expected)?;
    serde_json::from_str::<i64>(t).map_err(|_| format!("field `{name}`: expected {expected}, got {t}"))
}

/// A string field.
pub fn str_field(f: &Fields<'_>, name: &str, expected: &str) -> Result<String, String> {
    let t = raw(f, name, expected)?;
    serde_json::from_str::<String>(t).map_err(|_| format!("field `{name}`: expected {expected}, got {t}"))
}

/// An array of integers each at most `max`, pushed into `out` (cleared first).
pub fn int_array<T: TryFrom<u64>>(f: &Fields<'_>, name: &str, max_desc: &str, out: &mut Vec<T>) -> Result<(), String> {
    let expected = format!("an array of integers from 0 to {max_desc}");
    let t = raw(f, name, &expected)?;
    let items =
        serde_json::from_str::<Vec<&RawValue>>(t).map_err(|_| format!("field `{name}`: expected {expected}"))?;
    out.clear();
    out.reserve(items.len());
    for (i, item) in items.iter().enumerate() {
        let v = serde_json::from_str::<u64>(item.get()).ok().and_then(|v| T::try_from(v).ok()).ok_or_else(|| {
            format!("field `{name}[{i}]`: expected an integer from 0 to {max_desc}, got {}", item.get())
        })?;
        out.push(v);
    }
    Ok(())
}

/// Converts a JSON number literal (non-negative; decimal point and exponent allowed) of a unit
/// worth 10^`unit_exp` ns into integer ns, exactly from its decimal digits, rounding half up:
/// ns = floor(v * 10^unit_exp + 1/2). `None` when negative, not a number or beyond u64.
pub fn decimal_to_ns(text: &str, unit_exp: i64) -> Option<u64> {
    let (mant, exp) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i64>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None; // also a sign: timestamps are not negative
    }
    if mant.ends_with('.') || !(-1_000_000..=1_000_000).contains(&exp) {
        return None;
    }
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').skip_while(|&d| d == 0).collect();
    // value = D * 10^e ns, D the digits as an integer.
    let e = exp - frac.len() as i64 + unit_exp;
    let int_of = |ds: &[u8]| -> Option<u64> {
        ds.iter().try_fold(0u64, |acc, &d| acc.checked_mul(10)?.checked_add(u64::from(d)))
    };
    if e >= 0 {
        if digits.is_empty() {
            return Some(0);
        }
        let d = int_of(&digits)?;
        return d.checked_mul(10u64.checked_pow(u32::try_from(e).ok()?)?);
    }
    let drop = usize::try_from(-e).ok()?;
    if drop > digits.len() {
        return Some(0); // below 0.1 ns
    }
    let keep = digits.len() - drop;
    let q = int_of(&digits[..keep])?;
    if digits[keep] >= 5 { q.checked_add(1) } else { Some(q) }
}

/// A number field converted by [`decimal_to_ns`]; a positive number too large for 64-bit
/// nanoseconds says so (it is not malformed).
pub fn ns_field(f: &Fields<'_>, name: &str, unit_exp: i64, expected: &str) -> Result<u64, String> {
    let t = raw(f, name, expected)?;
    decimal_to_ns(t, unit_exp).ok_or_else(|| {
        // `t` is JSON: a number, or another value (a string, an array, ...)
        let positive_number = !t.starts_with('-') && t.parse::<f64>().is_ok_and(|v| v > 0.0);
        if positive_number {
            let unit = 10u64.pow(unit_exp.clamp(0, 19) as u32);
            let (whole, frac) = (u64::MAX / unit, u64::MAX % unit);
            let name_of = match unit_exp {
                9 => "s",
                6 => "ms",
                _ => "units",
            };
            format!(
                "field `{name}`: {t} {name_of} overflows 64-bit nanoseconds (at most {whole}.{frac:0w$} {name_of})",
                w = unit_exp.clamp(0, 19) as usize
            )
        } else {
            format!("field `{name}`: expected {expected}, got {t}")
        }
    })
}
