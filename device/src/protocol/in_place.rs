//! Threads formatting a long line in place: a print such a thread's `Display` makes in
//! that second pass is skipped (`print`'s module doc says why). Part of the shared
//! [`Context`](crate::protocol::context::Context), which the host makes: GPUs have no
//! thread-locals, so a thread finds its own mark by its key.

use crate::protocol::sync::{fence, AtomicU32, AtomicU64, Ordering, Padded};

/// The threads formatting a long line in place now (its second pass), each marked in one
/// slot: a print such a thread's `Display` makes is skipped
/// ([`print_to`](crate::protocol::print::print_to)): it went out in the first pass, and
/// here it would wait for room behind the line's own unwritten bytes.
///
/// GPUs have no thread-locals, so a thread finds its mark by its key
/// (`arch::thread_key`: its launch and global index), in the slot the key hashes to. A
/// thread waits for that slot while another holds it, before it reserves its line: a holder
/// waits only for room, which earlier lines' bytes free, never for a thread without a mark
/// (lockstep rule: the waiter holds no log room, and its group's record is committed).
/// A slot is a seqlock: `gen` is odd while held; the key's words are read between two
/// looks at `gen`, so a reader never pairs one holder's launch with another's index.
#[repr(C)]
pub struct InPlaceLines {
    /// Marked threads: print's one look on its fast path, 0 almost always.
    pub count: Padded<AtomicU32>,
    slots: [Mark; IN_PLACE_SLOTS],
}

/// Slots of [`InPlaceLines`] (a power of two).
const IN_PLACE_SLOTS: usize = if cfg!(loom) { 2 } else { 64 };

#[repr(C)]
struct Mark {
    gen: AtomicU64,
    key: [AtomicU64; 2],
}

impl InPlaceLines {
    /// No thread marked.
    pub fn new() -> InPlaceLines {
        InPlaceLines {
            count: Padded(AtomicU32::new(0)),
            slots: core::array::from_fn(|_| Mark {
                gen: AtomicU64::new(0),
                key: [AtomicU64::new(0), AtomicU64::new(0)],
            }),
        }
    }

    fn slot(&self, key: (u64, u64)) -> &Mark {
        let h = (key.0 ^ key.1.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.slots[(h >> 58) as usize % IN_PLACE_SLOTS]
    }

    /// Whether the calling thread is marked (it is inside [`InPlaceLines::mark`]'s guard).
    #[inline(never)]
    #[cold]
    pub fn is_mine(&self) -> bool {
        let key = crate::protocol::arch::thread_key();
        let m = self.slot(key);
        // Acquire: pairs with the holder's release fence after its claim, and with the
        // release store that freed the slot (through the claim's RMW): the key words read
        // below are at least the ones written before that `gen`.
        let g = m.gen.load(Ordering::Acquire);
        if g & 1 == 0 {
            return false;
        }
        let k = (m.key[0].load(Ordering::Relaxed), m.key[1].load(Ordering::Relaxed));
        // Acquire fence: if either word came from a later holder, its claim (which moved
        // `gen` past `g`) happens-before the look below, which then sees the change.
        fence(Ordering::Acquire);
        m.gen.load(Ordering::Relaxed) == g && k == key
    }

    /// Marks the calling thread until the guard drops (also while unwinding), waiting for
    /// its slot while another thread holds it. A thread that holds its slot already (only
    /// a direct call of [`emit`](crate::protocol::print::emit) from inside a long line's
    /// `Display` gets here so) is not marked again: it would wait for itself.
    pub fn mark(&self) -> Option<Marked<'_>> {
        let key = crate::protocol::arch::thread_key();
        let m = self.slot(key);
        // Relaxed: the count only tells prints whether to look at the slots; the thread's
        // own look follows this add in its program order.
        self.count.fetch_add(1, Ordering::Relaxed);
        if self.is_mine() {
            self.count.fetch_add(u32::MAX, Ordering::Relaxed); // minus one: the targets' atomics have no `fetch_sub`
            return None;
        }
        let g = crate::protocol::wait::until(
            || {
                let g = m.gen.load(Ordering::Relaxed);
                // Acquire: the previous holder's clearing of the key (before its release
                // store of `gen`) happens-before our writes of it.
                (g & 1 == 0
                    && m.gen
                        .compare_exchange(g, g + 1, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok())
                .then_some(g + 1)
            },
            crate::protocol::arch::relax,
        );
        // Release fence: the claim (`gen` odd) is ordered before the key's words, for a
        // reader that sees them (`is_mine`'s acquire fence).
        fence(Ordering::Release);
        m.key[0].store(key.0, Ordering::Relaxed);
        m.key[1].store(key.1, Ordering::Relaxed);
        Some(Marked {
            lines: self,
            mark: m,
            gen: g,
        })
    }
}

impl Default for InPlaceLines {
    fn default() -> InPlaceLines {
        InPlaceLines::new()
    }
}

/// A thread's mark in [`InPlaceLines`]; dropping it frees the slot.
pub struct Marked<'a> {
    lines: &'a InPlaceLines,
    mark: &'a Mark,
    gen: u64,
}

impl Drop for Marked<'_> {
    fn drop(&mut self) {
        self.mark.key[0].store(0, Ordering::Relaxed);
        self.mark.key[1].store(0, Ordering::Relaxed);
        // Release: the cleared key happens-before the next holder's claim (its Acquire CAS)
        // and a reader's acquire of this `gen`.
        self.mark.gen.store(self.gen + 1, Ordering::Release);
        self.lines.count.fetch_add(u32::MAX, Ordering::Relaxed); // minus one, wrapping
    }
}
