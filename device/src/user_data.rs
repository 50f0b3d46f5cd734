//! What a CQE's `user_data` says it completes: the tag every SQE the device submits
//! carries, and the reaper's dispatch reads back.
//!
//! ```text
//!   user_data = kind << 56 | index << 32 | low
//!   print flight:    kind KIND_STREAM,  index = the stream's index, low = the flight's seq
//!   device request:  kind KIND_REQUEST, index = the completion slot, low = the slot's tag
//! ```

/// Where the kind sits in `user_data`.
const KIND_SHIFT: u32 = 56;

/// `user_data` kind of print flights ([`crate::protocol::stream`]).
pub(crate) const KIND_STREAM: u64 = 1;

/// `user_data` kind of device requests ([`crate::protocol::request`]).
pub(crate) const KIND_REQUEST: u64 = 2;

/// `user_data` for flight `seq` of stream `index`.
#[inline]
pub(crate) fn for_stream(index: u32, seq: u32) -> u64 {
    (KIND_STREAM << KIND_SHIFT) | ((index as u64) << 32) | seq as u64
}

/// `user_data` for the request in completion slot `slot` with tag `tag`.
#[inline]
pub(crate) fn for_request(slot: u32, tag: u32) -> u64 {
    (KIND_REQUEST << KIND_SHIFT) | ((slot as u64) << 32) | tag as u64
}

/// The kind: [`KIND_STREAM`], [`KIND_REQUEST`], or anything else for a stray.
#[inline]
pub(crate) fn kind(user_data: u64) -> u64 {
    user_data >> KIND_SHIFT
}

/// The stream index or completion slot (24 bits).
#[inline]
pub(crate) fn index(user_data: u64) -> u32 {
    ((user_data >> 32) & 0xff_ffff) as u32
}

/// The flight's seq or the slot's tag.
#[inline]
pub(crate) fn low(user_data: u64) -> u32 {
    user_data as u32
}
