//! The allocator [`export!`](crate::export) installs in a component: a bump
//! arena that lives exactly as long as the instance, that is one call.
//!
//! The host gives every call a fresh instance and discards its linear memory
//! afterwards, so a general-purpose allocator's bookkeeping (free lists,
//! coalescing, a `free` per object) is work nobody needs: it was about a
//! tenth of a call, measured. The arena hands out memory in order, takes
//! back only the most recent allocation (so a growing `Vec` or `String`
//! extends in place, and short-lived temporaries are reclaimed), and starts
//! in a 2 MiB zeroed static buffer. The buffer is part of the component's
//! initial memory (zeroed statics take no space in the file), so a typical
//! call never runs `memory.grow`, which costs the host an mprotect and a
//! reset of the grown pages: about 8 µs of a 40 µs call, measured. Past the
//! buffer it grows memory 128 KiB at a time.
//!
//! The buffer is the arena's own: wasi-libc's `malloc`, which C parts of
//! the standard library may still call, keeps the heap after the static
//! data to itself, and memory both grow is disjoint by construction. What a call allocates in total must
//! fit the call's memory cap (64 MiB by default); a plugin that churns
//! through more than that in one call should not use the SDK's `export!`.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::{Cell, UnsafeCell};

/// Wasm pages are 64 KiB.
const PAGE: usize = 64 << 10;

/// How much linear memory to add when the arena runs out: one `memory.grow`
/// covers a typical call.
const GROW_BYTES: usize = 128 << 10;

/// A bump allocator over linear memory; see the module docs.
pub struct CallArena {
    next: Cell<usize>,
    end: Cell<usize>,
    /// Start of the most recent allocation, the only one that can be
    /// reclaimed or extended in place.
    last: Cell<usize>,
}

// SAFETY: components built by the SDK are single-threaded (wasm32-wasip2
// has no threads), so the cells are never accessed concurrently.
unsafe impl Sync for CallArena {}

impl CallArena {
    /// An arena that has handed out nothing; the first allocation starts the
    /// static buffer.
    pub const fn new() -> Self {
        Self {
            next: Cell::new(0),
            end: Cell::new(0),
            last: Cell::new(usize::MAX),
        }
    }

    fn bump(&self, layout: Layout) -> *mut u8 {
        if self.end.get() == 0 {
            let start = BUFFER.0.get() as usize;
            self.next.set(start);
            self.end.set(start + BUFFER_BYTES);
        }
        let align = layout.align();
        let size = layout.size();
        let mut start = self.next.get().next_multiple_of(align);
        if start.saturating_add(size) > self.end.get() {
            let needed = size.saturating_add(align);
            let pages = needed.max(GROW_BYTES).div_ceil(PAGE);
            let previous = core::arch::wasm32::memory_grow(0, pages);
            if previous == usize::MAX {
                return std::ptr::null_mut();
            }
            let chunk = previous * PAGE;
            // Someone else (wasi-libc's own malloc) may have grown memory
            // since: continue in place only when the new pages follow ours.
            if chunk != self.end.get() {
                self.next.set(chunk);
            }
            self.end.set(chunk + pages * PAGE);
            start = self.next.get().next_multiple_of(align);
        }
        self.next.set(start + size);
        self.last.set(start);
        start as *mut u8
    }
}

/// Size of the arena's static buffer: several times what a kvstore call on a
/// 10 KB App with ten observed objects allocates.
const BUFFER_BYTES: usize = 2 << 20;

#[repr(C, align(16))]
struct Buffer(UnsafeCell<[u8; BUFFER_BYTES]>);

// SAFETY: as for `CallArena`: one thread; the buffer is only ever reached
// through the arena, which hands out disjoint ranges of it.
unsafe impl Sync for Buffer {}

static BUFFER: Buffer = Buffer(UnsafeCell::new([0; BUFFER_BYTES]));

impl Default for CallArena {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `bump` returns either null or a fresh, suitably aligned range of
// `layout.size()` bytes inside linear memory that no other allocation
// overlaps: `next` only moves forward past handed-out ranges, and moves back
// only over the most recent one when it is freed.
unsafe impl GlobalAlloc for CallArena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.bump(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        if ptr as usize == self.last.get() {
            self.next.set(ptr as usize);
            self.last.set(usize::MAX);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = ptr as usize;
        if start == self.last.get() && start.saturating_add(new_size) <= self.end.get() {
            self.next.set(start + new_size);
            return ptr;
        }
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = self.bump(new_layout);
        if !new.is_null() {
            // SAFETY: both ranges are valid for the smaller size, and `new`
            // is a fresh range that cannot overlap `ptr`'s.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
        }
        new
    }
}
