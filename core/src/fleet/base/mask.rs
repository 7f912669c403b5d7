//! Sets of pods as fixed-size bitsets: [`PodSet`]`<W>` holds pods `0..64 W` (pod p is bit p % 64
//! of word p / 64). The routers work on the narrowest width that holds the fleet: a fleet of at
//! most 64 pods is routed with `PodSet<1>` (a single `u64`, the code and speed of a plain
//! bitmask), a larger one with `PodSet<`[`POD_WORDS`]`>` ([`super::limits::MAX_PODS`] pods): the
//! width is a const generic chosen once per decision ([`width_words`]), never per key.

use super::limits::MAX_PODS;

/// Words of the widest pod set: [`MAX_PODS`] / 64.
pub const POD_WORDS: usize = MAX_PODS / 64;

/// Pods per word of a [`PodSet`].
pub const WORD_PODS: usize = 64;

const _: () = assert!(MAX_PODS.is_multiple_of(WORD_PODS) && POD_WORDS >= 1, "MAX_PODS must be a multiple of 64");

/// Words a set of `pods` pods needs (at least 1).
#[inline]
pub const fn words_for(pods: usize) -> usize {
    if pods == 0 { 1 } else { pods.div_ceil(WORD_PODS) }
}

/// The width, in words, the routers use for a fleet of `pods` pods: 1 up to 64 pods, else
/// [`POD_WORDS`] (two monomorphized paths, not one per width: the wide one is for large fleets,
/// where the per-pod work dominates the set operations).
#[inline]
pub const fn width_words(pods: usize) -> usize {
    if pods <= WORD_PODS { 1 } else { POD_WORDS }
}

/// The pods `0..n` as a bitmask (n <= 64).
#[inline]
pub const fn pods_mask(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// The bits of `candidates` whose pod (bit p: `pods[p]`) passes `holds`: the one walk both
/// engines' per-word probes share.
#[inline]
pub fn select<T>(pods: &[T], candidates: u64, holds: impl Fn(&T) -> bool) -> u64 {
    let mut out = 0;
    let mut rest = candidates;
    while rest != 0 {
        let p = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        if pods.get(p).is_some_and(&holds) {
            out |= 1 << p;
        }
    }
    out
}

/// Calls `f` on every set bit of `mask`, lowest first.
#[inline]
pub fn for_each(mut mask: u64, mut f: impl FnMut(usize)) {
    while mask != 0 {
        f(mask.trailing_zeros() as usize);
        mask &= mask - 1;
    }
}

/// A set of pods `0..64 W`: word w holds pods `64 w .. 64 w + 63`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PodSet<const W: usize>(pub [u64; W]);

impl<const W: usize> Default for PodSet<W> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<const W: usize> PodSet<W> {
    /// No pod.
    pub const EMPTY: Self = PodSet([0; W]);

    /// Pods `0..n` (n at most 64 W; more is cut).
    #[inline]
    pub fn first(n: usize) -> Self {
        let mut s = Self::EMPTY;
        for (w, word) in s.0.iter_mut().enumerate() {
            let lo = w * WORD_PODS;
            if n > lo {
                *word = pods_mask(n - lo);
            }
        }
        s
    }

    /// The set holding only pod `p`.
    #[inline]
    pub fn single(p: usize) -> Self {
        let mut s = Self::EMPTY;
        s.insert(p);
        s
    }

    /// Whether pod `p` is in the set.
    #[inline]
    pub fn contains(&self, p: usize) -> bool {
        self.0[p / WORD_PODS] & (1 << (p % WORD_PODS)) != 0
    }

    /// Adds pod `p`.
    #[inline]
    pub fn insert(&mut self, p: usize) {
        self.0[p / WORD_PODS] |= 1 << (p % WORD_PODS);
    }

    /// Removes pod `p`.
    #[inline]
    pub fn remove(&mut self, p: usize) {
        self.0[p / WORD_PODS] &= !(1u64 << (p % WORD_PODS));
    }

    /// Adds pod `p` when `on`.
    #[inline]
    pub fn set_if(&mut self, p: usize, on: bool) {
        self.0[p / WORD_PODS] |= u64::from(on) << (p % WORD_PODS);
    }

    /// True when no pod is in the set.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Number of pods in the set.
    #[inline]
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// The lowest pod of the set (64 W when empty).
    #[inline]
    pub fn lowest(&self) -> usize {
        for (w, &word) in self.0.iter().enumerate() {
            if word != 0 {
                return w * WORD_PODS + word.trailing_zeros() as usize;
            }
        }
        W * WORD_PODS
    }

    /// The `k`-th (0-based) pod of the set, lowest first (64 W when there are at most k).
    #[inline]
    pub fn nth(&self, mut k: u64) -> usize {
        for (w, &word) in self.0.iter().enumerate() {
            let c = u64::from(word.count_ones());
            if k < c {
                let mut m = word;
                for _ in 0..k {
                    m &= m - 1;
                }
                return w * WORD_PODS + m.trailing_zeros() as usize;
            }
            k -= c;
        }
        W * WORD_PODS
    }

    /// Pods in both sets.
    #[inline]
    #[must_use]
    pub fn and(mut self, other: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= b;
        }
        self
    }

    /// Pods in either set.
    #[inline]
    #[must_use]
    pub fn or(mut self, other: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
        self
    }

    /// Pods of `self` not in `other`.
    #[inline]
    #[must_use]
    pub fn and_not(mut self, other: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a &= !b;
        }
        self
    }

    /// Calls `f` on every pod of the set, lowest first.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(usize)) {
        for (w, &word) in self.0.iter().enumerate() {
            for_each(word, |b| f(w * WORD_PODS + b));
        }
    }

    /// The pods `p` of the set for which `keep(p)` holds.
    #[inline]
    #[must_use]
    pub fn filter(&self, keep: impl Fn(usize) -> bool) -> Self {
        let mut out = Self::EMPTY;
        self.for_each(|p| out.set_if(p, keep(p)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_is_the_u64_mask() {
        for n in [0, 1, 5, 63, 64] {
            assert_eq!(PodSet::<1>::first(n).0[0], pods_mask(n));
        }
        let s = PodSet::<1>([0b1011_0100]);
        assert_eq!((s.count(), s.lowest(), s.nth(0), s.nth(2), s.nth(3)), (4, 2, 2, 5, 7));
    }

    #[test]
    fn wide_sets_cross_words() {
        let mut s = PodSet::<16>::first(130);
        assert_eq!(s.count(), 130);
        assert_eq!(s.0[2], 0b11);
        s.remove(0);
        s.remove(64);
        assert_eq!((s.lowest(), s.nth(63), s.nth(127)), (1, 65, 129));
        assert!(s.contains(129) && !s.contains(130) && !s.contains(64));
        let mut seen = [false; 1024];
        s.for_each(|p| seen[p] = true);
        assert_eq!(seen.iter().filter(|&&b| b).count(), 128);
        let t = PodSet::<16>::single(1023);
        assert_eq!((t.lowest(), t.count(), s.and(t).is_empty(), s.or(t).count()), (1023, 1, true, 129));
        assert_eq!(PodSet::<16>::EMPTY.lowest(), 1024);
        assert_eq!(s.filter(|p| p % 2 == 1).count(), 65);
        assert_eq!(s.and_not(PodSet::first(64)).count(), 65);
        assert_eq!(PodSet::<16>::first(5000).count(), 1024);
    }

    #[test]
    fn widths() {
        assert_eq!((words_for(0), words_for(64), words_for(65), words_for(1024)), (1, 1, 2, 16));
        assert_eq!((width_words(64), width_words(65)), (1, POD_WORDS));
    }
}
