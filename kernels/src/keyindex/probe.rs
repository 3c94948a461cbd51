//! Which lists a query reads, nearest first, ordered only as far as a scan reads.

use crate::kmeans;

/// The lists nearest first ([`kmeans::ranked`]'s order), ordered only as far as a scan reads:
/// most scans read their first `probes` lists of hundreds or thousands, and sorting them all
/// costs more than reading a list.
#[derive(Default)]
pub struct ProbeOrder {
    /// Per list, larger nearer.
    nearness: Vec<f32>,
    /// `order[..ordered]` is final; the rest in no order.
    order: Vec<u32>,
    ordered: usize,
}

impl ProbeOrder {
    /// The order of lists by `nearness` (one value per list, larger nearer).
    pub fn new(nearness: Vec<f32>) -> ProbeOrder {
        ProbeOrder {
            order: (0..nearness.len() as u32).collect(),
            nearness,
            ordered: 0,
        }
    }

    /// Lists in all.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Places `start..end` of the order (`end` at most [`Self::len`]).
    pub fn lists(&mut self, start: usize, end: usize) -> &[u32] {
        if end > self.ordered {
            let key = &self.nearness;
            let rest = &mut self.order[self.ordered..];
            let wanted = end - self.ordered;
            if wanted < rest.len() {
                // The `wanted` nearest of the rest to the front, then in order.
                rest.select_nth_unstable_by(wanted, |&a, &b| kmeans::nearer_first(key, a, b));
            }
            rest[..wanted].sort_by(|&a, &b| kmeans::nearer_first(key, a, b));
            self.ordered = end;
        }
        &self.order[start..end]
    }
}
