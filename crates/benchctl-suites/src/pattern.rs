//! File name patterns as manifests and `[hub]` sections write them: `*` stands for any run
//! of characters (`/` included, where the name is a repo path).

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
pub fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return name == pattern;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_match_any_run_of_characters() {
        assert!(matches("*.json", "swap_att.json"));
        assert!(matches("swap_*.json", "swap_att.json"));
        assert!(matches("a*b*c", "axxbyyc") && matches("a*b*c", "abc"));
        assert!(!matches("*.json", "swap_att.jsonl"));
        assert!(!matches("a*b*c", "acb") && !matches("ab*ba", "aba"));
        assert!(matches("x.json", "x.json") && !matches("x.json", "y.json"));
    }
}
