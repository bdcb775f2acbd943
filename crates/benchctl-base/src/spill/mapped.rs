//! The one place spilled memory is touched directly: a [`Mapped`] vector's values in a shared
//! mapping of an unlinked file, the registry of live mappings, [`trim`] and the thread that
//! watches residency. Every `unsafe` of the spill module is here, each beside its reason;
//! [`super::SpillVec`] reaches the values only through the safe methods below.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::{directory, TRIM_BYTES};

/// A vector's values in a mapped, unlinked file: `capacity` values mapped, `len` written.
pub(super) struct Mapped<T> {
    file: std::fs::File,
    ptr: *mut T,
    pub(super) len: usize,
    pub(super) capacity: usize,
    /// This mapping's entry in the registry [`trim`] walks.
    id: u64,
}

// SAFETY: a `Mapped<T>` owns its mapping as a `Vec<T>` owns its buffer.
unsafe impl<T: Send> Send for Mapped<T> {}
// SAFETY: shared access is only through `&[T]`.
unsafe impl<T: Sync> Sync for Mapped<T> {}

impl<T: Copy> Mapped<T> {
    pub(super) fn create(dir: &std::path::Path, capacity: usize, values: &[T]) -> std::io::Result<Self> {
        let file = tempfile::tempfile_in(dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("create a file in {}: {e}", dir.display())))?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut mapped = Mapped {
            file,
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
            capacity: 0,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        };
        mapped.grow(capacity.max(values.len()))?;
        // SAFETY: room for `values` was just mapped; memory and the file never overlap.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), mapped.ptr, values.len()) };
        mapped.len = values.len();
        Ok(mapped)
    }

    /// Room for at least `capacity` values: the file's blocks reserved, then mapped again.
    pub(super) fn grow(&mut self, capacity: usize) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let page = 1 << 16;
        let bytes = capacity
            .checked_mul(size_of::<T>())
            .and_then(|b| b.max(1).checked_next_multiple_of(page))
            .ok_or_else(|| std::io::Error::other("a spill file larger than the address space"))?;
        let fd = self.file.as_raw_fd();
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a plain system call on a file this struct owns.
            let failed = unsafe { libc::posix_fallocate(fd, 0, bytes as libc::off_t) };
            if failed != 0 {
                return Err(std::io::Error::from_raw_os_error(failed));
            }
        }
        #[cfg(not(target_os = "linux"))]
        self.file.set_len(bytes as u64)?;
        // SAFETY: a new shared mapping of the whole (reserved) file.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut registry = registry();
        self.unmap(&mut registry);
        self.ptr = ptr.cast();
        self.capacity = bytes / size_of::<T>();
        registry.push((self.id, ptr as usize, bytes));
        drop(registry);
        watch_residency();
        Ok(())
    }

    /// The `len` values written.
    pub(super) fn as_slice(&self) -> &[T] {
        // SAFETY: the mapping holds `len` values written as `T`s and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Appends `values`, which must fit the capacity (the caller grows first).
    pub(super) fn extend_within(&mut self, values: &[T]) {
        assert!(self.len + values.len() <= self.capacity, "a spill mapping written past its capacity");
        // SAFETY: room for `values` past `len` was checked; a file never overlaps them.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.ptr.add(self.len), values.len()) };
        self.len += values.len();
    }

    /// Removes the current mapping (if any), under the registry's lock so that [`trim`]
    /// never advises an address that is being unmapped.
    fn unmap(&mut self, registry: &mut Vec<(u64, usize, usize)>) {
        if self.capacity == 0 {
            return;
        }
        registry.retain(|&(id, _, _)| id != self.id);
        // SAFETY: the mapping made by `grow`, with its length; nothing borrows it (`&mut self`).
        unsafe { libc::munmap(self.ptr.cast(), self.capacity * size_of::<T>()) };
        self.capacity = 0;
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        let mut registry = registry();
        if self.capacity > 0 {
            registry.retain(|&(id, _, _)| id != self.id);
            // SAFETY: as in `unmap`.
            unsafe { libc::munmap(self.ptr.cast(), self.capacity * size_of::<T>()) };
        }
    }
}

/// Every live mapping: its id, address and length.
pub(super) fn registry() -> std::sync::MutexGuard<'static, Vec<(u64, usize, usize)>> {
    static REGISTRY: Mutex<Vec<(u64, usize, usize)>> = Mutex::new(Vec::new());
    REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Drops every spilled page from the process's resident memory. The values are unchanged:
/// the mappings are shared, so the kernel keeps their pages (and writes the dirty ones to
/// their files) and the next access maps them again.
pub fn trim() {
    for &(_, address, bytes) in registry().iter() {
        // SAFETY: a live shared file mapping (the lock keeps it mapped); MADV_DONTNEED on a
        // shared mapping discards no data.
        unsafe { libc::madvise(address as *mut libc::c_void, bytes, libc::MADV_DONTNEED) };
    }
}

/// How often the residency watcher looks while any vector is spilled, and while none is.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(2);
const IDLE_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Starts, once, the thread that keeps spilled pages from piling up in the process: while any
/// vector is spilled it reads the process's resident shared pages (`/proc/self/statm`, where
/// spilled pages are counted) every [`WATCH_EVERY`], and [`trim`]s when they have grown by
/// [`TRIM_BYTES`] since the last trim. The containers' users never count their reads: a pass
/// over a million spilled items holds what the last few milliseconds touched. Where the
/// process has no `statm` (not Linux), the watcher stops and the kernel alone reclaims the
/// shared pages, as it does under memory pressure; a read that fails (no descriptor left for a
/// moment), the first one included, only skips that look.
fn watch_residency() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new().name("benchctl-spill-watch".into()).spawn(|| {
            if !std::path::Path::new(STATM).exists() {
                return;
            }
            let (mut baseline, mut spilled) = (None, true);
            loop {
                std::thread::sleep(if spilled { WATCH_EVERY } else { IDLE_EVERY });
                let Some(now) = resident_shared_bytes() else { continue };
                // Whether anything is spilled, asked after the reading: asked before, a vector
                // made and filled during the sleep would count in a baseline taken as if
                // nothing were (and a mapping dropped since the reading only raises the
                // baseline until the next look brings it down).
                spilled = !registry().is_empty();
                // The first baseline holds no spilled page: taken after a trim, since the
                // vector that started the watcher may have grown before this first look (a
                // baseline that held it would let that much more pile up for good).
                let baseline = match &mut baseline {
                    Some(baseline) => baseline,
                    None => {
                        trim();
                        baseline.insert(resident_shared_bytes().unwrap_or(now))
                    }
                };
                if spilled && now > *baseline + TRIM_BYTES {
                    trim();
                    *baseline = resident_shared_bytes().unwrap_or(now);
                } else if now < *baseline || !spilled {
                    // Other shared pages come and go (the binary's, a model file's): the
                    // baseline follows them down, and up while nothing is spilled.
                    *baseline = now;
                }
            }
        });
        if let Err(e) = spawned {
            crate::stderr_line!(
                "warning: failed to start the spill watcher ({e}); spilled pages are left to the kernel"
            );
        }
    });
}

/// Where Linux says what the process has resident.
const STATM: &str = "/proc/self/statm";

/// The process's resident shared pages (file-backed and shared memory), in bytes.
fn resident_shared_bytes() -> Option<usize> {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf only reads a system setting.
    let page = *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096));
    let statm = std::fs::read_to_string(STATM).ok()?;
    let shared: usize = statm.split_whitespace().nth(2)?.parse().ok()?;
    Some(shared * page)
}

pub(super) fn warn_once(e: &std::io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        crate::stderr_line!(
            "warning: failed to spill per-item state to {} ({e}); it stays in memory (set BENCHCTL_SPILL_DIR to a directory with room)",
            directory().display()
        );
    }
}
