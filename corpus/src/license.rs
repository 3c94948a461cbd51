//! Licence families: what a licence string (an SPDX id, a front-matter phrase such as
//! "MIT license", or a URL) allows, for the serving policy `pg_skills.allowed_licenses`.

/// A licence's family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// MIT, BSD, Apache, ISC, Unlicense, CC0, CC-BY, zlib, PSF.
    Permissive,
    /// LGPL, MPL, EPL, CDDL: copyleft on the file or library only.
    WeakCopyleft,
    /// GPL, AGPL, CC-BY-SA.
    Copyleft,
    /// Non-commercial or no-derivatives terms, "proprietary", "all rights reserved",
    /// or terms only in a separate file ("Complete terms in LICENSE.txt").
    Restricted,
    /// No licence recorded, or text that names none of the above.
    Unknown,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Permissive,
        Family::WeakCopyleft,
        Family::Copyleft,
        Family::Restricted,
        Family::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Permissive => "permissive",
            Family::WeakCopyleft => "weak-copyleft",
            Family::Copyleft => "copyleft",
            Family::Restricted => "restricted",
            Family::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.as_str() == s.trim())
    }
}

/// The family of a licence string; `None` or an empty string is [`Family::Unknown`].
pub fn family(license: Option<&str>) -> Family {
    let Some(l) = license.map(str::trim).filter(|l| !l.is_empty()) else {
        return Family::Unknown;
    };
    let t = l.to_ascii_lowercase().replace(['_', ' '], "-");
    let has = |w: &str| t.contains(w);
    // The most restrictive term named wins ("MIT, data CC-BY-NC" is restricted).
    if has("-nc") || has("noncommercial") || has("non-commercial") || has("-nd") || has("noderiv")
        || has("proprietary") || has("all-rights-reserved") || has("complete-terms-in")
        || has("commercial-license")
    {
        Family::Restricted
    } else if has("agpl") || has("affero") || (has("gpl") && !has("lgpl")) || has("general-public-license") && !has("lesser")
        || has("cc-by-sa") || has("sharealike") || has("share-alike") || has("eupl") || has("osl-")
    {
        Family::Copyleft
    } else if has("lgpl") || has("lesser-general") || has("mpl") || has("mozilla-public") || has("epl")
        || has("eclipse-public") || has("cddl")
    {
        Family::WeakCopyleft
    } else if has("mit") || has("bsd") || has("apache") || has("isc") || has("unlicense") || has("cc0")
        || has("cc-by") || has("creative-commons-attribution") || has("zlib") || has("psf")
        || has("python-software-foundation") || has("boost") || has("bsl-1.0") || has("0bsd")
        || has("public-domain") || has("wtfpl")
    {
        Family::Permissive
    } else {
        Family::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_of_real_licence_strings() {
        for (l, f) in [
            ("MIT", Family::Permissive),
            ("MIT license", Family::Permissive),
            ("BSD-3-Clause license", Family::Permissive),
            ("Apache License, Version 2.0", Family::Permissive),
            ("CC-BY-4.0", Family::Permissive),
            ("MPL-2.0", Family::WeakCopyleft),
            ("LGPL", Family::WeakCopyleft),
            ("GPL", Family::Copyleft),
            ("AGPL-3.0", Family::Copyleft),
            ("CC-BY-SA-4.0", Family::Copyleft),
            ("Complete terms in LICENSE.txt", Family::Restricted),
            ("Proprietary", Family::Restricted),
            ("MIT; the data is CC-BY-NC", Family::Restricted),
            ("https://github.com/sympy/sympy/blob/master/LICENSE", Family::Unknown),
            ("", Family::Unknown),
        ] {
            assert_eq!(family(Some(l)), f, "{l}");
        }
        assert_eq!(family(None), Family::Unknown);
        assert_eq!(Family::parse("weak-copyleft"), Some(Family::WeakCopyleft));
    }
}
