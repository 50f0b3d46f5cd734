//! What the runtime can observe of kernels and their I/O while it waits, for the watchdog's
//! hang reports: the rings' words, and on the CPU backend the SQ tickets, the streams'
//! positions (with the lines not confirmed written) and the blocks still running.

use std::time::Duration;

use gpuio_device::protocol::context::Context;
use gpuio_device::protocol::running::{Running, BLOCK_SLOTS};
use gpuio_device::protocol::sync::Ordering;

use super::Runtime;
use crate::error::{
    HangReport, OtherRing, RingWords, RunningBlocks, RunningThreads, SoloRing, StreamPositions, Tickets, Waiting,
};
use crate::shared::{Shared, State};

impl Runtime {
    /// What the runtime can observe now, for the watchdog: the ring's words; on the CPU
    /// backend also the SQ tickets, the streams' positions and the running kernel threads
    /// (all in host memory; on GPUs the context is in device memory, which the host
    /// cannot read while a kernel runs).
    pub(super) fn observe(&self, waiting_for: Waiting, detailed: bool) -> HangReport {
        // Ring `i`'s words, or the solo ring's for `usize::MAX`.
        let words = |i: usize| {
            let [sq_head, sq_tail, sq_flags, cq_head, cq_tail] = match i {
                usize::MAX => self.solo_words().unwrap_or_default(),
                i => self.ring_words_of(i),
            };
            RingWords {
                sq_head,
                sq_tail,
                sq_flags,
                cq_head,
                cq_tail,
            }
        };
        // The context is read every round on the CPU backend, where that is cheap; on a GPU
        // only for a report (it takes a copy from device memory).
        let cheap = matches!(self.shared.state, State::Host(_));
        let (tickets, streams, solo_held, blocks): (Vec<Tickets>, _, _, _) = (detailed || cheap)
            .then(|| self.shared.peek_context(|c| self.observe_context(c, detailed)))
            .flatten()
            .unwrap_or_default();
        HangReport {
            waiting_for,
            stalled: Duration::ZERO,
            ring: words(0),
            tickets: tickets.first().copied(),
            other_rings: (1..self.shared.queues.len())
                .map(|i| OtherRing {
                    words: words(i),
                    tickets: tickets.get(i).copied(),
                })
                .collect(),
            solo: self.solo_words().map(|_| {
                Box::new(SoloRing {
                    words: words(usize::MAX),
                    held: solo_held,
                })
            }),
            streams,
            running: Box::new(RunningThreads {
                count: self.cpu.running(),
                first: self.cpu.running_ids(HangReport::NAMED_THREADS),
                blocks,
            }),
            wake_error: self
                .shared
                .queues
                .iter()
                .chain(self.shared.solo.as_ref().map(|(q, _)| q))
                .find_map(|q| q.wake_error()),
        }
    }

    /// What `observe` reads of the context: each ring's SQ tickets, each live stream's
    /// positions (with the bytes written, which counts the completions not yet reaped, and
    /// for a `detailed` report the lines not confirmed written), whether the solo ring
    /// is held, and on a GPU the blocks still running.
    fn observe_context(&self, c: &Context, detailed: bool) -> Observed {
        let tickets = c
            .rings()
            .iter()
            .map(|r| Tickets {
                taken: r.tickets.load(Ordering::Acquire),
                published: r.published.load(Ordering::Acquire),
                reaped: r.reaped.load(Ordering::Acquire),
            })
            .collect();
        let streams: Vec<_> = Shared::live_streams(c)
            .map(|s| {
                // `committed` before `reserved`: if they are then equal, every byte below
                // them was complete when `committed` was read (a reservation made in between
                // would make `reserved` larger).
                let committed = s.committed.load(Ordering::Acquire);
                (
                    s.index as usize,
                    StreamPositions {
                        fd: s.fd,
                        reserved: s.reserved.load(Ordering::Acquire),
                        committed,
                        flushed: s.flushed.load(Ordering::Acquire),
                        released: s.released.load(Ordering::Acquire),
                        written: 0,
                        unconfirmed_lines: 0,
                    },
                    (s.io_base, s.cap),
                )
            })
            .collect();
        // Prints go through ring 0. Looked at after the positions were read: a completion
        // reaped in between is counted in neither, never in both (what is written is
        // under-counted, never over-counted).
        let unreaped = self.shared.queues[0].unreaped_stream_bytes();
        let streams = streams
            .into_iter()
            .map(|(i, s, log)| {
                let written = s.released + unreaped.get(i).copied().unwrap_or(0);
                StreamPositions {
                    written,
                    // Only for a report: a look through up to the whole log.
                    unconfirmed_lines: if detailed {
                        // Complete bytes: those handed to writes, or all of them when no
                        // print was in progress.
                        let complete = if s.committed == s.reserved {
                            s.committed
                        } else {
                            s.flushed
                        };
                        newlines_in_log(log, written, complete)
                    } else {
                        0
                    },
                    ..s
                }
            })
            .collect();
        // Only for a report: a look through every block counter. The CPU backend also names
        // its threads one by one (`cpu.running_ids`), and counts blocks only for kernels
        // that call `context::count_running` (`kernel!` does); a GPU's report says so where
        // no block is counted.
        let blocks = detailed
            .then(|| running_blocks(&c.running))
            .and_then(|blocks| match self.shared.state {
                State::Host(_) => blocks,
                _ => Some(blocks.unwrap_or_default()),
            });
        (tickets, streams, Some(c.solo.held()), blocks)
    }
}

/// What [`Runtime::observe_context`] reads: each ring's tickets, the streams' positions,
/// whether the solo ring is held, the blocks still running.
type Observed = (Vec<Tickets>, Vec<StreamPositions>, Option<bool>, Option<RunningBlocks>);

/// The blocks `running` counts with threads not returned (`None`: none).
fn running_blocks(running: &Running) -> Option<RunningBlocks> {
    let (mut threads, mut blocks, mut first) = (0u64, 0usize, Vec::new());
    for (slot, n) in running.busy() {
        threads += u64::from(n);
        blocks += 1;
        if first.len() < HangReport::NAMED_THREADS {
            first.push((slot as u32, n));
        }
    }
    (blocks != 0).then(|| RunningBlocks {
        threads,
        blocks,
        first,
        modulo: running.wrapped().then_some(BLOCK_SLOTS as u32),
    })
}

/// Newlines among the log positions `from..to` of a stream whose log is `cap` bytes at the
/// host address `io_base`: the whole lines a report counts as not confirmed written. `to`
/// is where the log is known complete: `flushed`, or `committed` when it equals `reserved`
/// (`committed` is a count, and producers commit out of order: past `flushed` a byte may
/// still be being written while a later one is committed).
fn newlines_in_log((io_base, cap): (u64, u64), from: u64, to: u64) -> u64 {
    if io_base == 0 || cap == 0 || to <= from {
        return 0;
    }
    // Counters read one at a time while kernels run: never look past one log's worth.
    (from..to.min(from + cap))
        .filter(|p| {
            // SAFETY: `io_base` is where the host process (and its io_uring) sees the log's
            // `cap` bytes, which live as long as the runtime. Positions from `written` up to
            // `to` are complete (handed to a write, or all committed with no reservation
            // beyond: see above) and not released: no producer writes them until their write
            // completes and is reaped (a producer writes position `p + cap` only once
            // `released` passes `p`), so this read races with no store.
            let b = unsafe { std::ptr::read_volatile((io_base + p % cap) as *const u8) };
            b == b'\n'
        })
        .count() as u64
}
