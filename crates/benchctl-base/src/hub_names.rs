//! Names the Hugging Face hub gives and takes — repo ids, commits, paths inside a repo —
//! checked once, for the model and dataset clients and the manifests that name repos.

/// Whether `repo` is a hub repo id as the hub allows them: `ORG/NAME`, each part letters,
/// digits, `-`, `_` or `.`, not starting or ending with `-` or `.`, without `--` or `..` (which
/// the cache's folder names could not tell apart).
pub fn is_repo_id(repo: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
            && !p.contains("--")
            && !p.contains("..")
    };
    matches!(repo.split_once('/'), Some((org, name)) if part(org) && part(name))
}

/// Whether `s` is a commit hash: 40 hexadecimal digits.
pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `path` (a file name inside a repo, or a revision) stays inside its folder: relative,
/// no `..`, no empty or `.` part, no backslash or NUL.
pub fn is_repo_path(path: &str) -> bool {
    !(path.is_empty()
        || path.starts_with('/')
        || path.contains(['\\', '\0'])
        || path.split('/').any(|part| part.is_empty() || part == "." || part == ".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_are_org_and_name() {
        for good in ["imirandam/BiVLC", "stanfordnlp/colorswap", "a-b/c_d.e"] {
            assert!(is_repo_id(good), "{good}");
        }
        for bad in ["BiVLC", "a/b/c", "/b", "a/", "a--b/c", "a/b..c", "a/.b", "a/b-", "a b/c", "a/b?x"] {
            assert!(!is_repo_id(bad), "{bad}");
        }
    }

    #[test]
    fn repo_paths_stay_inside_the_repo() {
        for good in ["config.json", "data/test-00000.parquet", "refs/pr/1", "main"] {
            assert!(is_repo_path(good), "{good}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b", "a\0b"] {
            assert!(!is_repo_path(bad), "{bad:?}");
        }
        assert!(is_commit_hash("0123456789abcdef0123456789abcdef01234567") && !is_commit_hash("main"));
    }
}
