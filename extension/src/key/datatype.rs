//! `skills.key`: a 512-d skill key stored as 512 f16 values.
//!
//! Varlena layout: the 4-byte header, the dimension count (u16), two reserved bytes, then the
//! values as IEEE half floats, native order. f16 halves the bytes every scan reads; on the key
//! benchmark's data its exact top-10 equals the f32 top-10 (benches/RESULTS.md, kernels test
//! `f16_storage_keeps_rankings`). Input accepts pgvector's text form `[1, 2.5, ...]` and `real[]`;
//! NaN, infinities, values beyond f16's range (±65504), wrong dimension counts and all-zero
//! keys are rejected with SQLSTATE and a hint.

use half::f16;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};

use crate::errors::raise;
use crate::fmgr::{arg, v1_function};

/// Dimensions of every skill key: a 384-d sentence embedding padded with zeros to 512.
pub const KEY_DIM: usize = 512;
/// The varlena header (4 bytes), the dimension count (u16) and two reserved bytes.
const HEADER: usize = 4 + 4;

/// A detoasted key: points into a palloc'd or in-buffer varlena that lives for the call.
pub struct Key {
    values: *const u8,
    dim: usize,
}

impl Key {
    /// SAFETY: `datum` is a non-null `skills.key` datum valid for the current call.
    ///
    /// The datum's bytes are not trusted (a damaged page, a hostile binary value): the length
    /// is checked before the dimension is read from it, and the dimension must account for
    /// every byte, so [`Key::values`] never reads past the value.
    pub unsafe fn from_datum(datum: pg_sys::Datum) -> Key {
        let v = pg_sys::pg_detoast_datum(datum.cast_mut_ptr::<pg_sys::varlena>());
        // The bytes after the varlena header, whichever header form the value has.
        let len = pgrx::varlena::varsize_any_exhdr(v);
        let data = pgrx::varlena::vardata_any(v) as *const u8;
        if len < HEADER - 4 {
            raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("a skills.key value of {len} bytes is shorter than its header"),
                None,
            );
        }
        let dim = u16::from_ne_bytes([*data, *data.add(1)]) as usize;
        if len != HEADER - 4 + 2 * dim || dim == 0 {
            raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("a skills.key value of {len} bytes claims {dim} dimensions"),
                None,
            );
        }
        Key {
            values: data.add(HEADER - 4),
            dim,
        }
    }

    /// The values; copies into `scratch` only when the varlena is not 2-byte aligned.
    pub fn values<'a>(&'a self, scratch: &'a mut Vec<f16>) -> &'a [f16] {
        // SAFETY: `values` points at `2 * dim` readable bytes for the call (from_datum checked).
        let bytes = unsafe { std::slice::from_raw_parts(self.values, 2 * self.dim) };
        match bytemuck::try_cast_slice::<u8, f16>(bytes) {
            Ok(v) => v,
            Err(_) => {
                scratch.clear();
                scratch.extend(
                    bytes
                        .chunks_exact(2)
                        .map(|b| f16::from_ne_bytes([b[0], b[1]])),
                );
                scratch
            }
        }
    }

    pub fn to_vec(&self) -> Vec<f16> {
        let mut scratch = Vec::new();
        self.values(&mut scratch).to_vec()
    }
}

/// A new `skills.key` datum (palloc'd in the current memory context).
pub fn key_datum(values: &[f16]) -> pg_sys::Datum {
    let size = HEADER + 2 * values.len();
    unsafe {
        let v = pg_sys::palloc0(size) as *mut pg_sys::varlena;
        pgrx::set_varsize_4b(v, size as i32);
        let data = pgrx::varlena::vardata_any(v) as *mut u8;
        let dim = (values.len() as u16).to_ne_bytes();
        *data = dim[0];
        *data.add(1) = dim[1];
        std::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, data.add(4), 2 * values.len());
        pg_sys::Datum::from(v)
    }
}

/// Checks and converts input values; every rejection says what and how to fix it.
pub fn checked_key(values: impl ExactSizeIterator<Item = f64>) -> Vec<f16> {
    if values.len() != KEY_DIM {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("a skill key has {KEY_DIM} dimensions, not {}", values.len()),
            Some("Pad shorter embeddings with zeros to 512 values."),
        );
    }
    let mut out = Vec::with_capacity(KEY_DIM);
    let mut nonzero = false;
    for (i, x) in values.enumerate() {
        if x.is_nan() {
            raise(
                PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                format!("NaN in dimension {} of a skill key", i + 1),
                Some("Keys must be finite numbers."),
            );
        }
        let h = f16::from_f64(x);
        if h.is_infinite() {
            raise(
                PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                format!(
                    "value {x} in dimension {} of a skill key is out of range",
                    i + 1
                ),
                Some("Keys are stored as f16: values must lie within ±65504 (normalise the key)."),
            );
        }
        nonzero |= h.to_f32() != 0.0;
        out.push(h);
    }
    if !nonzero {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            "a skill key must not be the zero vector",
            Some("A zero key has no direction: cosine and inner-product rankings are undefined for it."),
        );
    }
    out
}

/// Parses `[v1, v2, ...]`.
pub fn parse_key(text: &str) -> Vec<f16> {
    let bad = |why: &str| -> ! {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type skills.key: {why}"),
            Some("Write a key as [v1, v2, ..., v512], or cast a real[]."),
        )
    };
    let t = text.trim();
    let Some(inner) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) else {
        bad("it must start with \"[\" and end with \"]\"")
    };
    if inner.trim().is_empty() {
        checked_key(std::iter::empty::<f64>());
    }
    let values: Vec<f64> = inner
        .split(',')
        .map(|p| {
            let p = p.trim();
            // Rust's parser accepts "inf" and "nan"; both are rejected by value below.
            p.parse::<f64>().unwrap_or_else(|_| {
                bad(&format!(
                    "\"{}\" is not a number",
                    p.chars().take(40).collect::<String>()
                ))
            })
        })
        .collect();
    checked_finite(values)
}

/// The shortest decimal that reads back as the same f16.
fn shortest(h: f16) -> String {
    let x = h.to_f32();
    if x == 0.0 {
        return "0".into();
    }
    for digits in 1..=8 {
        let s = format!("{:.*e}", digits - 1, x);
        if s.parse::<f32>().map(f16::from_f32) == Ok(h) {
            // Plain notation when it is short.
            let plain = s.parse::<f32>().map(|v| v.to_string()).unwrap_or(s.clone());
            return if plain.len() <= s.len() + 1 { plain } else { s };
        }
    }
    x.to_string()
}

pub fn format_key(values: &[f16]) -> String {
    let mut out = String::with_capacity(values.len() * 8 + 2);
    out.push('[');
    for (i, &v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&shortest(v));
    }
    out.push(']');
    out
}

v1_function!(pg_finfo_pgs_key_in, pgs_key_in, |fcinfo| {
    let input = core::ffi::CStr::from_ptr(arg(fcinfo, 0).cast_mut_ptr::<core::ffi::c_char>());
    let text = input.to_str().unwrap_or_else(|_| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
            "invalid input syntax for type skills.key: not UTF-8",
            None,
        )
    });
    key_datum(&parse_key(text))
});

v1_function!(pg_finfo_pgs_key_out, pgs_key_out, |fcinfo| {
    let text = format_key(&Key::from_datum(arg(fcinfo, 0)).to_vec());
    // palloc'd: Postgres frees it with the call's memory context.
    let p = pg_sys::palloc(text.len() + 1) as *mut u8;
    std::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len());
    *p.add(text.len()) = 0;
    pg_sys::Datum::from(p)
});

// Binary input (COPY BINARY, binary protocol): u16 dimensions, u16 reserved, then each value
// as f16 bits, network order; checked like text input.
v1_function!(pg_finfo_pgs_key_recv, pgs_key_recv, |fcinfo| {
    let buf = arg(fcinfo, 0).cast_mut_ptr::<pg_sys::StringInfoData>();
    let dim = pg_sys::pq_getmsgint(buf, 2) as usize;
    let _reserved = pg_sys::pq_getmsgint(buf, 2);
    if dim != KEY_DIM {
        checked_key(std::iter::repeat_n(0.0, dim));
    }
    let values: Vec<f64> = (0..dim)
        .map(|_| f16::from_bits(pg_sys::pq_getmsgint(buf, 2) as u16).to_f64())
        .collect();
    key_datum(&checked_finite(values))
});

v1_function!(pg_finfo_pgs_key_send, pgs_key_send, |fcinfo| {
    let values = Key::from_datum(arg(fcinfo, 0)).to_vec();
    let mut bytes = Vec::with_capacity(4 + 2 * values.len());
    bytes.extend_from_slice(&(values.len() as u16).to_be_bytes());
    bytes.extend_from_slice(&0u16.to_be_bytes());
    for v in &values {
        bytes.extend_from_slice(&v.to_bits().to_be_bytes());
    }
    let size = 4 + bytes.len();
    let v = pg_sys::palloc(size) as *mut pg_sys::varlena;
    pgrx::set_varsize_4b(v, size as i32);
    std::ptr::copy_nonoverlapping(
        bytes.as_ptr(),
        pgrx::varlena::vardata_any(v) as *mut u8,
        bytes.len(),
    );
    pg_sys::Datum::from(v)
});

// real[] → key (the cast).
v1_function!(
    pg_finfo_pgs_key_from_real_array,
    pgs_key_from_real_array,
    |fcinfo| {
        let values = pgrx::fcinfo::pg_getarg::<Vec<Option<f32>>>(fcinfo, 0).unwrap_or_default();
        if values.iter().any(Option::is_none) {
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                "a skill key cannot contain NULL",
                Some("Every one of the 512 values must be a number."),
            );
        }
        key_datum(&checked_finite(
            values.into_iter().map(|v| v.unwrap() as f64).collect(),
        ))
    }
);

// key → real[] (the cast).
v1_function!(
    pg_finfo_pgs_key_to_real_array,
    pgs_key_to_real_array,
    |fcinfo| {
        let values: Vec<f32> = Key::from_datum(arg(fcinfo, 0))
            .to_vec()
            .iter()
            .map(|h| h.to_f32())
            .collect();
        values.into_datum().expect("an array datum")
    }
);

v1_function!(pg_finfo_pgs_key_dims, pgs_key_dims, |fcinfo| {
    (Key::from_datum(arg(fcinfo, 0)).dim as i32)
        .into_datum()
        .expect("an int4")
});

v1_function!(pg_finfo_pgs_key_norm, pgs_key_norm, |fcinfo| {
    let k = Key::from_datum(arg(fcinfo, 0));
    let mut scratch = Vec::new();
    let norm = k
        .values(&mut scratch)
        .iter()
        .map(|h| h.to_f64() * h.to_f64())
        .sum::<f64>()
        .sqrt();
    norm.into_datum().expect("a float8")
});

/// Rejects infinities (with their dimension), then checks as [`checked_key`].
fn checked_finite(values: Vec<f64>) -> Vec<f16> {
    if let Some(i) = values.iter().position(|x| x.is_infinite()) {
        raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("infinity in dimension {} of a skill key", i + 1),
            Some("Keys must be finite numbers."),
        );
    }
    checked_key(values.into_iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_reads_back() {
        for bits in (0u16..0x7c00).step_by(97) {
            let h = f16::from_bits(bits);
            let s = shortest(h);
            assert_eq!(f16::from_f32(s.parse::<f32>().unwrap()), h, "{s}");
        }
        assert_eq!(shortest(f16::from_f32(0.5)), "0.5");
        assert_eq!(shortest(f16::from_f32(-2.0)), "-2");
    }
}
