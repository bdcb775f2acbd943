//! Per-item state kept on disk, so that an eval's memory does not grow with its suite.
//!
//! A [`SpillVec`] is a vector that moves into an unlinked temporary file once the per-item
//! state held in memory, all vectors together, would pass a budget ([`budget`]: 128 MiB unless
//! `BENCHCTL_SPILL_AT` says otherwise): a suite whose state fits stays in memory at full speed,
//! a larger one spills its growing vectors, and the memory it holds stays under the budget
//! however large it is. The file is mapped shared: the values stay addressable as a slice (the
//! items, their input slots, the score tensor and the per-item metric values all borrow from
//! it as they did from a `Vec`), the kernel's page cache holds what fits and writes the rest to
//! disk, and [`trim`] drops every spilled page from the process's resident set (the next access
//! reads it back from the page cache or the file, unchanged). The module watches its own
//! residency (a thread that trims when the spilled pages resident in the process have grown by
//! [`TRIM_BYTES`]): what is resident at any time is what the last few milliseconds of work
//! touched, not the suite, and no pass over the items counts what it reads.
//!
//! Growing a file reserves its blocks first (`posix_fallocate`), so a full disk is an error
//! there, never a `SIGBUS` on a later write. Spilling is an accelerator of memory, never a
//! point of failure: when the directory cannot take a file or a file cannot grow, the vector
//! stays in (or comes back to) memory, with one warning.
//!
//! Where: `BENCHCTL_SPILL_DIR`, else the system's temporary directory (`TMPDIR`); on a tmpfs
//! the "disk" is memory and swap. When: `BENCHCTL_SPILL_AT` bytes in memory (0 spills every
//! vector, which the test suite's second pass uses to run every spilled path).

mod index;
#[cfg(unix)]
mod mapped;
mod strings;

pub use index::{Index, Map};
#[cfg(unix)]
pub use mapped::trim;

/// Drops every spilled page from the process's resident memory (nothing spills here).
#[cfg(not(unix))]
pub fn trim() {}
pub use strings::Strings;

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

#[cfg(unix)]
use mapped::{warn_once, Mapped};

/// How many bytes of [`SpillVec`]s may be held in memory, all together, before a growing one
/// moves to a file (`BENCHCTL_SPILL_AT`, default 128 MiB).
pub fn budget() -> usize {
    static AT: OnceLock<usize> = OnceLock::new();
    *AT.get_or_init(|| std::env::var("BENCHCTL_SPILL_AT").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(128 << 20))
}

/// How far the spilled pages resident in the process may grow between two trims: what
/// spilled state adds to the resident set at most, give or take what one watch interval's
/// work touches.
pub const TRIM_BYTES: usize = 16 << 20;

/// Bytes of [`SpillVec`] capacity held in memory now, all vectors together.
static IN_MEMORY: AtomicUsize = AtomicUsize::new(0);

/// A vector smaller than this never spills (unless the budget is smaller still): a file and
/// a mapping for a few values would cost more than they save.
const SMALLEST_SPILL: usize = 64 << 10;

/// Whether a vector about to hold `bytes` in memory should move to a file instead.
fn over_budget(bytes: usize, held: usize) -> bool {
    let budget = budget();
    bytes >= SMALLEST_SPILL.min(budget) && IN_MEMORY.load(Ordering::Relaxed).saturating_sub(held) + bytes > budget
}

/// What is wrong with `BENCHCTL_SPILL_AT`, if anything: the binary refuses it before any
/// work, as it does a bad `BENCHCTL_CPU` (the directory is not checked up front: one that
/// cannot take a file only keeps the state in memory, with a warning).
pub fn settings_problem() -> Option<String> {
    let value = std::env::var_os("BENCHCTL_SPILL_AT")?;
    match value.to_str().map(|v| v.trim().parse::<usize>()) {
        Some(Ok(_)) => None,
        _ => Some(format!(
            "read BENCHCTL_SPILL_AT={value:?}: expected how many bytes of per-item state to hold in memory before it spills to files (0: none; unset: 128 MiB)"
        )),
    }
}

/// The directory spill files are created in (`BENCHCTL_SPILL_DIR`, else `TMPDIR`).
pub fn directory() -> std::path::PathBuf {
    std::env::var_os("BENCHCTL_SPILL_DIR").map(Into::into).unwrap_or_else(std::env::temp_dir)
}

/// A growable array of `T` in memory until the vectors in memory would pass the [`budget`],
/// then in a mapped temporary file (see the module's docs). Reads and writes go through the slice it derefs to.
///
/// `T: Copy` is what makes the file safe to hold the values: a copy is its bytes, there is
/// no destructor to run, and only bytes written as a `T` are ever read back as one (the file
/// is unlinked and private to the process; slots past `len` are never read).
pub struct SpillVec<T: Copy> {
    storage: Storage<T>,
}

enum Storage<T> {
    Memory(Vec<T>),
    #[cfg(unix)]
    File(Mapped<T>),
}

impl<T: Copy> SpillVec<T> {
    pub const fn new() -> Self {
        Self { storage: Storage::Memory(Vec::new()) }
    }

    /// An empty vector with room for `capacity` values (in a file at once when that would pass
    /// the budget).
    pub fn with_capacity(capacity: usize) -> Self {
        let mut v = Self::new();
        v.reserve(capacity);
        v
    }

    /// `len` copies of `value`.
    pub fn from_elem(value: T, len: usize) -> Self {
        let mut v = Self::with_capacity(len);
        v.resize(len, value);
        v
    }

    pub fn len(&self) -> usize {
        match &self.storage {
            Storage::Memory(v) => v.len(),
            #[cfg(unix)]
            Storage::File(m) => m.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_slice(&self) -> &[T] {
        self
    }

    /// An empty vector in a file from the start, whatever the budget (for tests).
    #[cfg(all(test, unix))]
    fn in_a_file(capacity: usize) -> Self {
        let mut v = Self::new();
        v.spill(capacity);
        v
    }

    /// Whether the values live in a file (for tests and measurements).
    pub fn is_spilled(&self) -> bool {
        !matches!(self.storage, Storage::Memory(_))
    }

    /// Room for `additional` more values.
    pub fn reserve(&mut self, additional: usize) {
        let needed = self.len().saturating_add(additional);
        match &mut self.storage {
            Storage::Memory(v) => {
                let held = v.capacity() * size_of::<T>();
                if needed > v.capacity()
                    && size_of::<T>() > 0
                    && over_budget(needed.saturating_mul(size_of::<T>()), held)
                {
                    self.spill(needed);
                } else {
                    v.reserve(additional);
                    IN_MEMORY.fetch_add(v.capacity() * size_of::<T>() - held, Ordering::Relaxed);
                }
            }
            #[cfg(unix)]
            Storage::File(m) => {
                if needed > m.capacity {
                    if let Err(e) = m.grow(needed) {
                        warn_once(&e);
                        self.unspill(needed);
                    }
                }
            }
        }
    }

    pub fn push(&mut self, value: T) {
        if let Storage::Memory(v) = &mut self.storage {
            if v.len() < v.capacity() {
                v.push(value);
                return;
            }
        }
        let len = self.len();
        self.reserve_doubling(1);
        match &mut self.storage {
            Storage::Memory(v) => v.push(value),
            #[cfg(unix)]
            Storage::File(m) => {
                // `reserve_doubling` made room for one more value past `len`.
                debug_assert_eq!(m.len, len);
                m.extend_within(&[value]);
            }
        }
    }

    pub fn extend_from_slice(&mut self, values: &[T]) {
        let len = self.len();
        self.reserve_doubling(values.len());
        match &mut self.storage {
            Storage::Memory(v) => v.extend_from_slice(values),
            #[cfg(unix)]
            Storage::File(m) => {
                // Room for `values` past `len` was reserved.
                debug_assert_eq!(m.len, len);
                m.extend_within(values);
            }
        }
    }

    /// Grows to `len` with copies of `value`, or cuts to `len`.
    pub fn resize(&mut self, len: usize, value: T) {
        if len <= self.len() {
            self.truncate(len);
            return;
        }
        self.reserve(len - self.len());
        const CHUNK: usize = 4096;
        let fill = [value; CHUNK];
        while self.len() < len {
            let n = (len - self.len()).min(CHUNK);
            self.extend_from_slice(&fill[..n]);
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match &mut self.storage {
            Storage::Memory(v) => v.truncate(len),
            #[cfg(unix)]
            Storage::File(m) => m.len = m.len.min(len),
        }
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Room for `additional` more, growing geometrically (as `Vec` does) so that pushes
    /// stay amortised O(1).
    fn reserve_doubling(&mut self, additional: usize) {
        let (len, capacity) = match &self.storage {
            Storage::Memory(v) => (v.len(), v.capacity()),
            #[cfg(unix)]
            Storage::File(m) => (m.len, m.capacity),
        };
        let needed = len.saturating_add(additional);
        if needed > capacity {
            self.reserve(needed.max(capacity.saturating_mul(2)).max(8) - len);
        }
    }

    /// Moves the values into a file with room for `capacity`; on failure they stay in memory.
    #[cfg(unix)]
    fn spill(&mut self, capacity: usize) {
        let Storage::Memory(v) = &mut self.storage else { return };
        let held = v.capacity() * size_of::<T>();
        match Mapped::create(&directory(), capacity, v) {
            Ok(mapped) => {
                IN_MEMORY.fetch_sub(held, Ordering::Relaxed);
                self.storage = Storage::File(mapped);
            }
            Err(e) => {
                warn_once(&e);
                v.reserve(capacity.saturating_sub(v.len()));
                IN_MEMORY.fetch_add(v.capacity() * size_of::<T>() - held, Ordering::Relaxed);
            }
        }
    }

    #[cfg(not(unix))]
    fn spill(&mut self, capacity: usize) {
        let Storage::Memory(v) = &mut self.storage;
        let held = v.capacity() * size_of::<T>();
        v.reserve(capacity.saturating_sub(v.len()));
        IN_MEMORY.fetch_add(v.capacity() * size_of::<T>() - held, Ordering::Relaxed);
    }

    /// Brings the values back into memory with room for `capacity` (a file that cannot grow).
    #[cfg(unix)]
    fn unspill(&mut self, capacity: usize) {
        let mut v = Vec::with_capacity(capacity);
        v.extend_from_slice(self);
        IN_MEMORY.fetch_add(v.capacity() * size_of::<T>(), Ordering::Relaxed);
        self.storage = Storage::Memory(v);
    }

    #[cfg(not(unix))]
    fn unspill(&mut self, _capacity: usize) {}
}

impl<T: Copy> Drop for SpillVec<T> {
    fn drop(&mut self) {
        if let Storage::Memory(v) = &self.storage {
            IN_MEMORY.fetch_sub(v.capacity() * size_of::<T>(), Ordering::Relaxed);
        }
    }
}

impl<T: Copy> Default for SpillVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> Deref for SpillVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.storage {
            Storage::Memory(v) => v,
            #[cfg(unix)]
            Storage::File(m) => m.as_slice(),
        }
    }
}

impl<T: Copy> DerefMut for SpillVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            Storage::Memory(v) => v,
            #[cfg(unix)]
            Storage::File(m) => m.as_mut_slice(),
        }
    }
}

impl<T: Copy> Clone for SpillVec<T> {
    fn clone(&self) -> Self {
        let mut copy = Self::with_capacity(self.len());
        copy.extend_from_slice(self);
        copy
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for SpillVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Copy + PartialEq> PartialEq for SpillVec<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Eq> Eq for SpillVec<T> {}

impl<T: Copy> Extend<T> for SpillVec<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        let iter = iter.into_iter();
        self.reserve(iter.size_hint().0);
        iter.for_each(|v| self.push(v));
    }
}

impl<T: Copy> FromIterator<T> for SpillVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v = Self::new();
        v.extend(iter);
        v
    }
}

impl<T: Copy> From<Vec<T>> for SpillVec<T> {
    fn from(values: Vec<T>) -> Self {
        let bytes = values.capacity() * size_of::<T>();
        if !over_budget(bytes, 0) {
            IN_MEMORY.fetch_add(bytes, Ordering::Relaxed);
            return Self { storage: Storage::Memory(values) };
        }
        let mut v = Self::with_capacity(values.len());
        v.extend_from_slice(&values);
        v
    }
}

impl<'a, T: Copy> IntoIterator for &'a SpillVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Copy> From<&[T]> for SpillVec<T> {
    fn from(values: &[T]) -> Self {
        let mut v = Self::with_capacity(values.len());
        v.extend_from_slice(values);
        v
    }
}

/// Sorts `values` by `key`, stably. A spilled vector is sorted in bounded memory: runs of
/// [`TRIM_BYTES`] sorted in place one at a time (each trimmed after), then merged into a new
/// vector, read and written in order. One in memory (or of one run) is sorted in place.
pub fn sort_by_key<T: Copy, K: Ord>(values: &mut SpillVec<T>, key: impl Fn(&T) -> K) {
    let run = (TRIM_BYTES / size_of::<T>().max(1)).max(2);
    if !values.is_spilled() || values.len() <= run {
        values.sort_by_key(&key);
        return;
    }
    for chunk in values.chunks_mut(run) {
        chunk.sort_by_key(&key);
    }
    // The smallest head of the runs next; a tie goes to the earlier run, which keeps the
    // sort stable (each run is).
    let mut heads: std::collections::BinaryHeap<std::cmp::Reverse<(K, usize)>> = Default::default();
    let mut next: Vec<usize> = (0..values.len()).step_by(run).collect();
    let ends: Vec<usize> = next.iter().map(|&start| (start + run).min(values.len())).collect();
    for (r, &at) in next.iter().enumerate() {
        heads.push(std::cmp::Reverse((key(&values[at]), r)));
    }
    let mut merged = SpillVec::with_capacity(values.len());
    while let Some(std::cmp::Reverse((_, r))) = heads.pop() {
        merged.push(values[next[r]]);
        next[r] += 1;
        if next[r] < ends[r] {
            heads.push(std::cmp::Reverse((key(&values[next[r]]), r)));
        }
    }
    *values = merged;
}

#[cfg(test)]
mod tests {
    use super::mapped::Mapped;
    use super::*;

    /// Held by every test that maps files: the residency test measures the whole process's
    /// file pages, which a spilling test running beside it would add to.
    fn mapping_alone() -> std::sync::MutexGuard<'static, ()> {
        static MAPPING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        MAPPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The process's resident spilled memory (shared file pages), in bytes.
    fn resident_file_bytes() -> Option<usize> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("RssFile:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<usize>().ok()? * 1024)
    }

    #[cfg(unix)]
    #[test]
    fn spilled_strings_read_back_as_pushed() {
        let _alone = mapping_alone();
        let written: Vec<String> = (0..20_000).map(|i| format!("line {i}: é{}", "x".repeat(i % 7))).collect();
        let mut lines = Strings { text: SpillVec::in_a_file(16), ends: SpillVec::in_a_file(16) };
        lines.extend(&written);
        lines.push("");
        lines.push("two\nparts");
        assert!(lines.text.is_spilled());
        assert_eq!(lines.len(), written.len() + 2);
        trim();
        assert!(lines.iter().zip(&written).all(|(a, b)| a == b));
        assert_eq!((lines.get(written.len()), lines.get(written.len() + 1)), ("", "two\nparts"));
        assert_eq!(lines.iter().count(), lines.len());
    }

    #[cfg(unix)]
    #[test]
    fn a_spilled_vector_reads_back_what_was_written() {
        let _alone = mapping_alone();
        let mut v: SpillVec<u64> = SpillVec::in_a_file(16);
        // Grown well past its first mapping, by pushes.
        let n = 3 << 20;
        for i in 0..n as u64 {
            v.push(i * 3);
        }
        assert!(v.is_spilled());
        assert_eq!(v.len(), n);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
        v[7] = 1;
        trim();
        assert_eq!(v[7], 1, "a write survives a trim");
        assert_eq!(v[n - 1], (n as u64 - 1) * 3);
        v.extend_from_slice(&[5, 6]);
        v.truncate(n + 1);
        assert_eq!(&v[n - 1..], &[(n as u64 - 1) * 3, 5]);
        let copy = v.clone();
        assert_eq!(copy, v);
        v.resize(n + 5000, 9);
        assert_eq!(v.len(), n + 5000);
        assert!(v[n + 1..].iter().all(|&x| x == 9));
    }

    #[cfg(unix)]
    #[test]
    fn a_vector_past_the_budget_spills() {
        let _alone = mapping_alone();
        // Past the whole budget by itself, whatever other tests hold.
        let bytes = budget() + (1 << 20);
        let mut v: SpillVec<u8> = SpillVec::with_capacity(bytes);
        assert!(v.is_spilled(), "{bytes} bytes against a budget of {}", budget());
        v.resize(bytes, 7);
        assert!(v.iter().step_by(4096).all(|&b| b == 7));
    }

    #[test]
    fn a_small_vector_stays_in_memory() {
        if budget() < 1024 {
            return;
        }
        let v: SpillVec<u8> = (0..100u8).collect();
        assert!(!v.is_spilled());
        assert_eq!(v.iter().map(|&x| x as usize).sum::<usize>(), 4950);
    }

    #[cfg(unix)]
    #[test]
    fn borrowed_values_spill_and_come_back() {
        let _alone = mapping_alone();
        let words: Vec<String> = (0..100_000).map(|i| format!("word {i}")).collect();
        let mut refs: SpillVec<&str> = SpillVec::in_a_file(1);
        refs.extend(words.iter().map(String::as_str));
        trim();
        assert!(refs.iter().zip(&words).all(|(a, b)| *a == b.as_str()));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pass_over_spilled_values_leaves_them_trimmed_and_unchanged() {
        let _alone = mapping_alone();
        // 64 MiB written through the mapping and read whole, with no call from the pass: the
        // watcher trims the pages that pile up, without being asked, and the values are kept.
        // How much a pass holds at its end depends on when the watcher ran (on a busy machine,
        // not during a pass of a few milliseconds: `bench` measures that); here, that the
        // watcher brings it below 40 MiB within a second, 500 of its looks.
        let n = 8 << 20;
        let mut v: SpillVec<u64> = SpillVec::in_a_file(n);
        for i in 0..n as u64 {
            v.push(i ^ 0x5555);
        }
        assert!(v.is_spilled());
        let expected = (0..n as u64).fold(0u64, |s, i| s.wrapping_add(i ^ 0x5555));
        for pass in 0..2 {
            let sum: u64 = v.iter().fold(0u64, |s, &x| s.wrapping_add(x));
            assert_eq!(sum, expected, "pass {pass}: the values are kept");
            let started = std::time::Instant::now();
            let mut resident = resident_file_bytes().unwrap_or(usize::MAX);
            while resident >= 40 << 20 && started.elapsed() < std::time::Duration::from_secs(1) {
                std::thread::sleep(std::time::Duration::from_millis(5));
                resident = resident_file_bytes().unwrap_or(usize::MAX);
            }
            assert!(resident < 40 << 20, "pass {pass}: {} MiB still resident after a second", resident >> 20);
        }
        trim();
        assert_eq!(v.iter().fold(0u64, |s, &x| s.wrapping_add(x)), expected, "a trim keeps the values");
    }

    #[test]
    fn sorting_in_runs_matches_a_stable_sort() {
        let _alone = mapping_alone();
        // Several runs (TRIM_BYTES of 16-byte values is a million per run), keys with many
        // ties, so that stability shows: equal keys keep their input order.
        let n = 2 * TRIM_BYTES / 16 + 12_345;
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let values: Vec<(u64, u64)> = (0..n as u64)
            .map(|i| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % 1000, i)
            })
            .collect();
        let mut expected = values.clone();
        expected.sort_by_key(|&(k, _)| k);
        let mut in_memory = SpillVec::from(values.clone());
        sort_by_key(&mut in_memory, |&(k, _)| k);
        assert_eq!(&in_memory[..], &expected[..]);
        #[cfg(unix)]
        {
            let mut spilled = SpillVec::in_a_file(values.len());
            spilled.extend_from_slice(&values);
            sort_by_key(&mut spilled, |&(k, _)| k);
            assert_eq!(&spilled[..], &expected[..]);
        }
        let mut small: SpillVec<i32> = [3, -1, 2].as_slice().into();
        sort_by_key(&mut small, |&v| v);
        assert_eq!(&small[..], &[-1, 2, 3]);
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_that_cannot_take_a_file_is_named() {
        let made = Mapped::<u32>::create(&directory(), 10, &[1, 2, 3]).map(|m| m.len);
        assert_eq!(made.ok(), Some(3));
        let missing = std::path::Path::new("/nonexistent/benchctl-spill");
        let message = Mapped::<u32>::create(missing, 10, &[1, 2, 3]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("/nonexistent/benchctl-spill"), "{message}");
    }
}
