//! Byte-level helpers of the directory-stream codec: frame prefixes, bounds-checked field
//! reads from the front of a slice, refusal-reason cutting.

use super::{MAX_REASON_LEN, RequestError};

/// The longest prefix of `reason` of at most [`MAX_REASON_LEN`] bytes that ends at a
/// character boundary.
pub(super) fn cut_reason(reason: &str) -> &str {
    let mut cut = reason.len().min(MAX_REASON_LEN);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    &reason[..cut]
}

/// A frame with a placeholder length prefix and its type byte.
pub(super) fn frame_start(type_byte: u8) -> Vec<u8> {
    vec![0, 0, 0, 0, type_byte]
}

/// Fill in the length prefix (saturated, so that an impossible length is refused rather
/// than wrapped).
pub(super) fn frame_end(mut out: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(out.len() - 4).unwrap_or(u32::MAX);
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

pub(super) fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

pub(super) fn split_type(frame: &[u8], max: usize) -> Result<(u8, &[u8]), RequestError> {
    match frame.split_first() {
        Some((&type_byte, body)) if frame.len() <= max => Ok((type_byte, body)),
        _ => Err(RequestError::FrameLength {
            len: frame.len(),
            max,
        }),
    }
}

pub(super) fn too_long(field: &'static str, len: usize, max: usize) -> RequestError {
    RequestError::TooLong { field, len, max }
}

pub(super) fn take<'a>(
    b: &mut &'a [u8],
    n: usize,
    field: &'static str,
) -> Result<&'a [u8], RequestError> {
    if b.len() < n {
        return Err(RequestError::Truncated {
            field,
            needed: n,
            remaining: b.len(),
        });
    }
    let (head, tail) = b.split_at(n);
    *b = tail;
    Ok(head)
}

pub(super) fn array<const N: usize>(
    b: &mut &[u8],
    field: &'static str,
) -> Result<[u8; N], RequestError> {
    let mut out = [0u8; N];
    out.copy_from_slice(take(b, N, field)?);
    Ok(out)
}

pub(super) fn u64_field(b: &mut &[u8], field: &'static str) -> Result<u64, RequestError> {
    Ok(u64::from_be_bytes(array(b, field)?))
}

pub(super) fn len_field(b: &mut &[u8], field: &'static str) -> Result<usize, RequestError> {
    Ok(usize::try_from(u32::from_be_bytes(array(b, field)?)).unwrap_or(usize::MAX))
}

/// The rest of the body, at most `max` bytes.
pub(super) fn rest<'a>(
    b: &mut &'a [u8],
    field: &'static str,
    max: usize,
) -> Result<&'a [u8], RequestError> {
    if b.len() > max {
        return Err(too_long(field, b.len(), max));
    }
    take(b, b.len(), field)
}

pub(super) fn end(body: &[u8]) -> Result<(), RequestError> {
    match body.len() {
        0 => Ok(()),
        count => Err(RequestError::TrailingBytes { count }),
    }
}
