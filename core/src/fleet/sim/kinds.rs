//! The fleet's named choices: the touch order, where the exact view comes from, and whose cache a
//! request reads (each with its CLI name).

/// Order in which a request's keys are touched after the hit test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum TouchOrder {
    /// k_{m-1} first, k_0 last: the prefix ends up most recent (default, as vLLM frees blocks).
    TailFirst,
    /// k_0 first, k_{m-1} last (the seed's variant).
    InOrder,
}

impl core::fmt::Display for TouchOrder {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl TouchOrder {
    /// Both orders.
    pub const ALL: [TouchOrder; 2] = [TouchOrder::TailFirst, TouchOrder::InOrder];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            TouchOrder::TailFirst => "tail-first",
            TouchOrder::InOrder => "in-order",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// Where the prefix-aware router reads "which pods hold this key" from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum IndexKind {
    /// A global key -> pod-mask table ([`BlockIndex`]) fed by the pods' insert and evict events,
    /// as llm-d's KV-cache indexer does. Costs 21..43 bytes per indexed key and two table updates
    /// per miss.
    Global,
    /// The pods' own key tables answer directly (the union of N exact views is the same set as
    /// the global index), plus the same stale-evict queue. No extra memory; a match costs up to
    /// N lookups per block. Results are identical to [`IndexKind::Global`] (tested).
    PodTables,
}

impl core::fmt::Display for IndexKind {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl IndexKind {
    /// Both kinds.
    pub const ALL: [IndexKind; 2] = [IndexKind::Global, IndexKind::PodTables];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            IndexKind::Global => "global",
            IndexKind::PodTables => "pod-tables",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Whose cache a request reads and fills (docs/MODEL.md, "Shared (global) cache").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum CacheMode {
    /// Every pod has its own LRU of C blocks (the default).
    #[default]
    Local,
    /// One fleet-wide LRU of N x C blocks that every pod reads and fills (Mooncake's global
    /// cache); the routed pod still does the prefill.
    Global,
}

impl core::fmt::Display for CacheMode {
    /// Its CLI name.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl CacheMode {
    /// Both modes.
    pub const ALL: [CacheMode; 2] = [CacheMode::Local, CacheMode::Global];

    /// The CLI name.
    pub const fn name(self) -> &'static str {
        match self {
            CacheMode::Local => "local",
            CacheMode::Global => "global",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// True for [`CacheMode::Local`] (serde: the default is not written).
    pub fn is_local(&self) -> bool {
        *self == CacheMode::Local
    }
}
