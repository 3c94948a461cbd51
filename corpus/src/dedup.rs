//! Exact deduplication by content hash, and the ingestion pipeline that feeds it.
//!
//! Identical normalised content (name, description, instructions) from several places is one
//! skill whose provenance lists every place. The same name with different content stays two
//! skills: the hash, not the name, is the identity.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::drop_reason::DropReason;
use crate::filter::is_code_related;
use crate::readers::Item;
use crate::skill::Skill;

/// A deduplicated skill ready to load.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub content_hash: String,
    pub skill: Skill,
}

impl Prepared {
    pub fn locations(&self) -> Vec<String> {
        locations_of(&self.skill.provenance)
    }
}

/// The `location` of every provenance entry that has one.
pub fn locations_of(provenance: &[Value]) -> Vec<String> {
    provenance
        .iter()
        .filter_map(|p| p.get("location").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// What happened to the inputs before the database saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestCounts {
    /// Inputs seen (files or records).
    pub read: usize,
    /// Inputs that became a skill (before deduplication).
    pub kept: usize,
    /// Dropped inputs by reason key.
    pub dropped: BTreeMap<String, usize>,
    /// Kept inputs folded into another one with the same content.
    pub merged_duplicates: usize,
    /// Every dropped input with its location and reason.
    pub drop_log: Vec<(String, String)>,
}

impl IngestCounts {
    pub fn dropped_total(&self) -> usize {
        self.dropped.values().sum()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PipelineOptions {
    /// Apply the code filter (off for benchmark corpora).
    pub code_filter: bool,
}

/// Merges provenance entries: an entry replaces one with the same `location`, others append.
pub fn merge_provenance(into: &mut Vec<Value>, from: &[Value]) {
    for entry in from {
        let loc = entry.get("location");
        match into
            .iter_mut()
            .find(|e| loc.is_some() && e.get("location") == loc)
        {
            Some(existing) => *existing = entry.clone(),
            None => into.push(entry.clone()),
        }
    }
}

/// What [`Pipeline::push`] works out of an item on its own, before it is merged.
enum Checked {
    NotCodeRelated,
    Kept { hash: String },
}

fn check(code_filter: bool, skill: &Skill) -> Checked {
    if code_filter && !is_code_related(skill) {
        Checked::NotCodeRelated
    } else {
        Checked::Kept {
            hash: skill.content_hash(),
        }
    }
}

/// Accumulates items: counts, filters and deduplicates them, keeping first-seen order.
#[derive(Debug)]
pub struct Pipeline {
    options: PipelineOptions,
    counts: IngestCounts,
    by_hash: HashMap<String, usize>,
    /// location -> content hash, to refuse two contents at one place
    hash_at: HashMap<String, String>,
    skills: Vec<Prepared>,
}

impl Pipeline {
    pub fn new(options: PipelineOptions) -> Self {
        Pipeline {
            options,
            counts: IngestCounts::default(),
            by_hash: HashMap::new(),
            hash_at: HashMap::new(),
            skills: Vec::new(),
        }
    }

    pub fn drop(&mut self, location: String, reason: DropReason) {
        *self
            .counts
            .dropped
            .entry(reason.key().to_owned())
            .or_insert(0) += 1;
        self.counts.drop_log.push((location, reason.to_string()));
    }

    pub fn push(&mut self, item: Item) {
        self.merge(item, None);
    }

    /// [`Pipeline::push`] of each item in order, with the work of each item alone (the code
    /// filter, the content hash) done on every core first.
    pub fn push_all(&mut self, items: Vec<Item>) {
        use rayon::prelude::*;
        let code_filter = self.options.code_filter;
        let checked: Vec<Option<Checked>> = items
            .par_iter()
            .map(|item| match item {
                Item::Skill(skill) => Some(check(code_filter, skill)),
                Item::Dropped { .. } => None,
            })
            .collect();
        for (item, checked) in items.into_iter().zip(checked) {
            self.merge(item, checked);
        }
    }

    /// Counts and merges an item; `checked` is what [`check`] found for it, if already known.
    fn merge(&mut self, item: Item, checked: Option<Checked>) {
        self.counts.read += 1;
        let skill = match item {
            Item::Dropped { location, reason } => return self.drop(location, reason),
            Item::Skill(skill) => skill,
        };
        let checked = checked.unwrap_or_else(|| check(self.options.code_filter, &skill));
        let hash = match checked {
            Checked::NotCodeRelated => {
                let location = skill
                    .provenance
                    .first()
                    .and_then(|p| p.get("location"))
                    .and_then(Value::as_str);
                return self.drop(
                    location.unwrap_or(&skill.name).to_owned(),
                    DropReason::NotCodeRelated,
                );
            }
            Checked::Kept { hash } => hash,
        };
        let locations = locations_of(&skill.provenance);
        if let Some(clash) = locations
            .iter()
            .find(|l| self.hash_at.get(*l).is_some_and(|h| *h != hash))
        {
            return self.drop(clash.clone(), DropReason::DuplicateLocation(clash.clone()));
        }
        for l in locations {
            self.hash_at.insert(l, hash.clone());
        }
        self.counts.kept += 1;
        match self.by_hash.get(&hash) {
            Some(&i) => {
                self.counts.merged_duplicates += 1;
                let target = &mut self.skills[i].skill;
                merge_provenance(&mut target.provenance, &skill.provenance);
                if target.category.is_none() {
                    target.category = skill.category;
                }
            }
            None => {
                self.by_hash.insert(hash.clone(), self.skills.len());
                self.skills.push(Prepared {
                    content_hash: hash,
                    skill,
                });
            }
        }
    }

    pub fn finish(self) -> (Vec<Prepared>, IngestCounts) {
        (self.skills, self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skill::provenance_entry;

    fn item(name: &str, body: &str, location: &str) -> Item {
        Item::Skill(Skill {
            name: name.into(),
            description: "desc".into(),
            instructions: body.into(),
            category: None,
            license_field: None,
            provenance: vec![provenance_entry(&[("location", Some(location.into()))])],
        })
    }

    #[test]
    fn identical_content_merges_and_same_name_stays_apart() {
        let mut p = Pipeline::new(PipelineOptions { code_filter: false });
        p.push(item("a", "```\nx\n```", "repo1:a"));
        p.push(item("a", "```\nx\n```", "repo2:a"));
        p.push(item("a", "```\ny\n```", "repo3:a"));
        p.push(Item::Dropped {
            location: "repo1:bad".into(),
            reason: DropReason::Binary,
        });
        let (skills, counts) = p.finish();
        assert_eq!(skills.len(), 2);
        assert_eq!(skills[0].locations(), vec!["repo1:a", "repo2:a"]);
        assert_eq!(skills[1].locations(), vec!["repo3:a"]);
        assert_eq!(
            (
                counts.read,
                counts.kept,
                counts.merged_duplicates,
                counts.dropped_total()
            ),
            (4, 3, 1, 1)
        );
        assert_eq!(counts.read, counts.kept + counts.dropped_total());
    }

    #[test]
    fn same_location_twice_is_one_provenance_entry() {
        let mut p = Pipeline::new(PipelineOptions { code_filter: false });
        p.push(item("a", "b", "repo1:a"));
        p.push(item("a", "b", "repo1:a"));
        let (skills, _) = p.finish();
        assert_eq!(skills[0].skill.provenance.len(), 1);
    }

    #[test]
    fn two_contents_at_one_location_keep_the_first() {
        let mut p = Pipeline::new(PipelineOptions { code_filter: false });
        p.push(item("a", "one", "repo:a"));
        p.push(item("a", "two", "repo:a"));
        let (skills, counts) = p.finish();
        assert_eq!(skills.len(), 1);
        assert_eq!(skills[0].skill.instructions, "one");
        assert_eq!(counts.dropped.get("duplicate_location"), Some(&1));
        assert_eq!(counts.read, counts.kept + counts.dropped_total());
    }

    #[test]
    fn code_filter_drops_prose() {
        let mut p = Pipeline::new(PipelineOptions { code_filter: true });
        p.push(item("style", "Be polite in email.", "r:style"));
        p.push(item("cli", "```sh\nls\n```", "r:cli"));
        let (skills, counts) = p.finish();
        assert_eq!(skills.len(), 1);
        assert_eq!(counts.dropped.get("not_code_related"), Some(&1));
        assert_eq!(counts.drop_log[0].0, "r:style");
    }
}
