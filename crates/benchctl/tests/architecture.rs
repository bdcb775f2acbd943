//! The shape of the code, checked from its text: no import cycle between the modules of any
//! crate, the command line's types (clap) only in the binary, and every crate's functions and
//! files short enough to read (docs/architecture.md).
//!
//! The import graph: a node per source file (its module), an edge from a file to each module
//! it names through `crate::…`, `super::…`, `self::…` or one of its own child modules, in
//! `use` items and in paths in code (comments, string literals and a file's `mod tests` are
//! not read). A path
//! resolves to the longest module it names, through the re-exports (`pub use`) of the module
//! it lands on, so `crate::Error` leads to `error.rs`, not to `lib.rs`. A module naming one
//! of its own ancestors (`super::Shared`, `crate::Error` from `lib.rs`) is inside that
//! ancestor's namespace, not a layer above it: such names are not edges, so a cycle is one
//! that passes through a sibling, not a child using what its parent declares for it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest function any crate may have, in lines from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 100;
/// The longest source file of any crate, in lines, not counting an in-file test module.
const MAX_FILE_LINES: usize = 700;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default()
}

/// A source file's text with comments, string and char literals blanked (same length and
/// line breaks), so braces and paths are only code's.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let blank = |b: u8| if b == b'\n' { b'\n' } else { b' ' };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if bytes[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(bytes[i]));
                    i += 1;
                }
            }
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\"") || rest.starts_with(b"br"))
            && !i.checked_sub(1).is_some_and(|p| bytes[p].is_ascii_alphanumeric() || bytes[p] == b'_')
            && raw_string_hashes(rest).is_some()
        {
            let (open, hashes) = raw_string_hashes(rest).unwrap_or((0, 0));
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            out.extend(std::iter::repeat_n(b' ', open));
            i += open;
            while i < bytes.len() && !bytes[i..].starts_with(&close) {
                out.push(blank(bytes[i]));
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len().min(bytes.len() - i)));
            i += close.len();
        } else if bytes[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    out.push(b' ');
                    i += 1;
                }
                out.push(blank(bytes[i]));
                i += 1;
            }
            out.push(b' ');
            i += 1;
        } else if bytes[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime or label.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(2).position(|&b| b == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(2 + ch)
            };
            let len = end.unwrap_or(1);
            out.extend(rest[..len].iter().map(|&b| if len == 1 { b } else { blank(b) }));
            i += len;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `r"…"` / `r#"…"#` / `br"…"`: the opening's length and the number of `#`.
fn raw_string_hashes(rest: &[u8]) -> Option<(usize, usize)> {
    let start = if rest.starts_with(b"br") { 2 } else { 1 };
    let hashes = rest[start..].iter().take_while(|&&b| b == b'#').count();
    (rest.get(start + hashes) == Some(&b'"')).then_some((start + hashes + 1, hashes))
}

/// One module of a crate: its path from the crate root and its file.
struct Module {
    path: Vec<String>,
    file: PathBuf,
    code: String,
}

/// Every module file of the crate whose root file is `root`, following `mod name;` items.
fn modules(root: &Path) -> Vec<Module> {
    let mut found = Vec::new();
    let mut pending = vec![(Vec::<String>::new(), root.to_path_buf())];
    while let Some((path, file)) = pending.pop() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let code = code_only(&text);
        let dir = if path.is_empty() || file.ends_with("mod.rs") {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            file.with_extension("")
        };
        for name in declared_modules(&code) {
            let mut child = path.clone();
            child.push(name.clone());
            let as_file = dir.join(format!("{name}.rs"));
            let as_dir = dir.join(&name).join("mod.rs");
            let child_file = if as_file.is_file() { as_file } else { as_dir };
            if child_file.is_file() {
                pending.push((child, child_file));
            }
        }
        found.push(Module { path, file, code });
    }
    found
}

/// The `mod name;` items of a file (not inline `mod name { … }`).
fn declared_modules(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in code.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(at) = words.iter().position(|w| *w == "mod") {
            if let Some(name) = words.get(at + 1).and_then(|w| w.strip_suffix(';')) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// The paths a file names: `use` trees expanded (`a::{b, c::d}` → `a::b`, `a::c::d`), and
/// paths in code, each as its segments.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        if starts_word && code[i..].starts_with("use ") {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            expand_use_tree(code[i + 4..end].trim(), &mut Vec::new(), &mut paths);
            i = end;
            continue;
        }
        if starts_word && is_ident(bytes[i]) {
            let mut end = i;
            let mut segments = Vec::new();
            loop {
                let seg_start = end;
                while end < bytes.len() && is_ident(bytes[end]) {
                    end += 1;
                }
                segments.push(code[seg_start..end].to_string());
                if code[end..].starts_with("::") && bytes.get(end + 2).is_some_and(|&b| is_ident(b)) {
                    end += 2;
                } else {
                    break;
                }
            }
            if segments.len() > 1 {
                paths.push(segments);
            }
            i = end.max(i + 1);
            continue;
        }
        i += 1;
    }
    paths
}

fn expand_use_tree(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_start_matches("::");
    if tree.is_empty() {
        return;
    }
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        for part in split_top_level(inner) {
            expand_use_tree(part, &mut prefix.clone(), out);
        }
        return;
    }
    match tree.find("::") {
        Some(at) if !tree[..at].contains('{') => {
            prefix.push(tree[..at].trim().to_string());
            expand_use_tree(&tree[at + 2..], prefix, out);
        }
        _ => {
            let last = tree.split(" as ").next().unwrap_or(tree).trim();
            let mut path = prefix.clone();
            path.push(last.to_string());
            out.push(path);
        }
    }
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The names a module re-exports (`pub use a::b::{X, Y}`), each with the path it comes from.
fn reexports(module: &Module) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    for (at, _) in module.code.match_indices("pub use ") {
        let end = module.code[at..].find(';').map_or(module.code.len(), |e| at + e);
        let mut paths = Vec::new();
        expand_use_tree(&module.code[at + 8..end], &mut Vec::new(), &mut paths);
        for path in paths {
            if let Some(last) = path.last() {
                names.insert(last.clone(), path);
            }
        }
    }
    names
}

/// The import graph of one crate: each module to the modules it names.
fn import_graph(root: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules = modules(root);
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let exports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> =
        modules.iter().map(|m| (m.path.clone(), reexports(m))).collect();
    let mut graph = BTreeMap::new();
    for module in &modules {
        // A file's `#[cfg(test)] mod tests { … }` is not part of the product's layering (a
        // kernel's test may compare with the model code that uses the kernel).
        let tests_at = module.code.find("mod tests {").unwrap_or(module.code.len());
        let children: BTreeSet<String> = declared_modules(&module.code).into_iter().collect();
        let mut edges = BTreeSet::new();
        for path in named_paths(&module.code[..tests_at]) {
            let absolute: Vec<String> = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" => parent_of(&module.path).into_iter().chain(path[1..].iter().cloned()).collect(),
                "self" => module.path.iter().cloned().chain(path[1..].iter().cloned()).collect(),
                first if children.contains(first) => module.path.iter().cloned().chain(path.iter().cloned()).collect(),
                _ => continue,
            };
            // A module naming one of its ancestors uses its own namespace (a parent's shared
            // types, the crate's error): not an edge of the layering.
            if let Some(target) = resolve(&absolute, &known, &exports, 0) {
                if !module.path.starts_with(&target) {
                    edges.insert(target);
                }
            }
        }
        graph.insert(module.path.clone(), edges);
    }
    graph
}

fn parent_of(path: &[String]) -> Vec<String> {
    path[..path.len().saturating_sub(1)].to_vec()
}

/// The module a path names: its longest module prefix, or where that module's re-export of
/// the next name comes from.
fn resolve(
    path: &[String],
    known: &BTreeSet<Vec<String>>,
    exports: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> Option<Vec<String>> {
    let len = (0..=path.len()).rev().find(|&n| known.contains(&path[..n]))?;
    let module = path[..len].to_vec();
    if depth < 4 {
        if let Some(source) = path.get(len).and_then(|next| exports.get(&module)?.get(next)) {
            let absolute: Vec<String> = match source[0].as_str() {
                "crate" => source[1..].to_vec(),
                "super" => parent_of(&module).into_iter().chain(source[1..].iter().cloned()).collect(),
                "self" => module.iter().cloned().chain(source[1..].iter().cloned()).collect(),
                _ => module.iter().cloned().chain(source.iter().cloned()).collect(),
            };
            if known.contains(&absolute[..1.min(absolute.len())]) || absolute.len() > module.len() {
                if let Some(found) = resolve(&absolute, known, exports, depth + 1) {
                    return Some(found);
                }
            }
        }
    }
    Some(module)
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else { continue };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}

/// Every crate root of the workspace: `src/lib.rs` and `src/main.rs` of each crate.
fn crate_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let Ok(crates) = std::fs::read_dir(workspace().join("crates")) else { return roots };
    for entry in crates.flatten() {
        for root in ["src/lib.rs", "src/main.rs"] {
            let file = entry.path().join(root);
            if file.is_file() {
                roots.push(file);
            }
        }
    }
    roots.sort();
    roots
}

fn module_name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".into()
    } else {
        path.join("::")
    }
}

#[test]
fn no_crate_has_an_import_cycle() {
    let roots = crate_roots();
    assert!(roots.len() >= 6, "found only {} crate roots under {}", roots.len(), workspace().display());
    let mut problems = Vec::new();
    for root in &roots {
        let graph = import_graph(root);
        for cycle in cycles(&graph) {
            // Each edge inside the cycle, so the import to remove is named.
            let edges: Vec<String> = cycle
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| cycle.contains(to))
                        .map(move |to| format!("{} → {}", module_name(from), module_name(to)))
                })
                .collect();
            problems.push(format!("{}: {}", root.display(), edges.join(", ")));
        }
    }
    assert!(problems.is_empty(), "import cycles:\n{}", problems.join("\n"));
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    // Two modules that name each other, through a `use` group and a path in code.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\npub use a::Thing;\n")
        .expect("write lib.rs");
    std::fs::write(src.join("a.rs"), "use crate::{b::{self, Other}};\npub struct Thing;\n").expect("write a.rs");
    std::fs::write(src.join("b.rs"), "// crate::c is a comment\npub struct Other;\nfn f() { let _ = crate::Thing; }\n")
        .expect("write b.rs");
    // A child naming its parent is no cycle.
    std::fs::write(src.join("c.rs"), "mod d;\npub struct Shared;\nfn f() { d::g(); }\n").expect("write c.rs");
    std::fs::create_dir(src.join("c")).expect("create c/");
    std::fs::write(src.join("c/d.rs"), "use super::Shared;\npub fn g() {}\n").expect("write c/d.rs");
    let graph = import_graph(&src.join("lib.rs"));
    let found = cycles(&graph);
    let (c, d) = (vec!["c".to_string()], vec!["c".to_string(), "d".to_string()]);
    assert!(graph[&c].contains(&d) && !graph[&d].contains(&c), "graph: {graph:?}");
    assert_eq!(found, vec![vec![vec!["a".to_string()], vec!["b".to_string()]]], "graph: {graph:?}");
}

#[test]
fn only_the_binary_names_the_command_line_parser() {
    let mut offenders = Vec::new();
    for root in crate_roots().iter().filter(|r| r.ends_with("lib.rs")) {
        for module in modules(root) {
            if named_paths(&module.code).iter().any(|p| p[0] == "clap") {
                offenders.push(module.file.display().to_string());
            }
        }
    }
    assert!(offenders.is_empty(), "library modules that name clap: {offenders:?}");
}

/// Each function of `code` with its first line and its length in lines.
fn function_lengths(code: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(at) = line.find("fn ") else { continue };
        let before = line[..at].trim();
        let is_item = before.is_empty()
            || before.split_whitespace().all(|w| {
                matches!(w, "pub" | "pub(crate)" | "pub(super)" | "const" | "async" | "unsafe" | "extern")
                    || w.starts_with("pub(")
            });
        if !is_item {
            continue;
        }
        let name: String = line[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // The body: from the first `{` after the signature to its matching `}`; a `;` first
        // is a declaration without a body.
        let rest: String = lines[n..].join("\n");
        let (mut depth, mut end_line, mut opened, mut nested) = (0i32, None, false, 0i32);
        let mut line_no = n;
        for c in rest.chars() {
            match c {
                '\n' => line_no += 1,
                '(' | '[' | '<' if !opened => nested += 1,
                ')' | ']' | '>' if !opened => nested -= 1,
                ';' if !opened && nested <= 0 => break,
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth -= 1;
                    if opened && depth == 0 {
                        end_line = Some(line_no);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(end) = end_line {
            found.push((n + 1, end - n + 1, name));
        }
    }
    found
}

/// Every `.rs` file under the `src/` of every crate.
fn source_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|crate_dir| crate_dir.path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A file's lines without its in-file test module (`#[cfg(test)] mod tests { … }`).
fn lines_outside_tests(text: &str) -> usize {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let Some(start) =
        lines.windows(2).position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod tests"))
    else {
        return lines.len();
    };
    // The module's body: from its `{` to the matching `}`.
    let mut depth = 0i32;
    let mut end = lines.len() - 1;
    'outer: for (n, line) in lines.iter().enumerate().skip(start + 1) {
        for c in line.chars() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = n;
                        break 'outer;
                    }
                }
                _ => {}
            }
        }
    }
    lines.len() - (end - start + 1)
}

/// Every file over [`MAX_FILE_LINES`] (tests aside) and function over [`MAX_FUNCTION_LINES`]
/// among `files`, named with its place.
fn oversized(files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines = lines_outside_tests(&text);
        if lines > MAX_FILE_LINES {
            problems.push(format!("{}: {lines} lines besides its tests (at most {MAX_FILE_LINES})", file.display()));
        }
        for (line, length, name) in function_lengths(&code_only(&text)) {
            if length > MAX_FUNCTION_LINES {
                problems.push(format!(
                    "{}:{line}: fn {name} is {length} lines (at most {MAX_FUNCTION_LINES})",
                    file.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn every_crates_functions_and_files_are_short() {
    let files = source_files();
    for krate in ["benchctl", "benchctl-base", "benchctl-cpu", "benchctl-models", "benchctl-scoring", "benchctl-suites"]
    {
        let src = workspace().join("crates").join(krate).join("src");
        assert!(files.iter().any(|f| f.starts_with(&src)), "no source file found under {}", src.display());
    }
    let problems = oversized(&files);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The size gate catches each violation: a file one line too long (a test module beside it
/// does not count, as it does not save a file that is too long on its own), a function one
/// line too long, in any crate's `src/`.
#[test]
fn the_size_gate_sees_each_violation() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write a source file");
        path
    };
    let filler = |n: usize| (0..n).map(|i| format!("const C{i}: u8 = 0;\n")).collect::<String>();
    let tests = "#[cfg(test)]\nmod tests {\n".to_string() + &filler(200) + "}\n";
    let short = write("short.rs", filler(MAX_FILE_LINES - 3) + &tests);
    let long = write("long.rs", filler(MAX_FILE_LINES + 1) + &tests);
    let body = |n: usize| format!("fn f() {{\n{}}}\n", "    let _ = 1;\n".repeat(n - 2));
    let fits = write("fits.rs", body(MAX_FUNCTION_LINES));
    let too_long = write("too_long.rs", body(MAX_FUNCTION_LINES + 1));
    assert!(oversized(&[short, fits]).is_empty());
    let found = oversized(&[long, too_long]);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("long.rs: 701 lines besides its tests"), "{found:?}");
    assert!(found[1].contains("too_long.rs:1: fn f is 101 lines"), "{found:?}");
}

/// Every place in `files` that leaks memory to make data `'static` (`Box::leak`, `.leak()`):
/// data read at run time (a manifest's suite) owns its strings instead.
fn leaks(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let code = code_only(&std::fs::read_to_string(file).unwrap_or_default());
        for (n, line) in code.lines().enumerate() {
            if line.contains("Box::leak") || line.contains(".leak()") || line.contains("String::leak") {
                found.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn no_crate_leaks_memory_for_static_data() {
    let found = leaks(&source_files());
    assert!(found.is_empty(), "leaked allocations:\n{}", found.join("\n"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("leaky.rs");
    std::fs::write(
        &file,
        "// Box::leak in a comment is fine\nfn f() -> &'static str { Box::leak(String::new().into_boxed_str()) }\n",
    )
    .expect("write a source file");
    assert_eq!(leaks(&[file]).len(), 1, "the check sees a leak in code, not in a comment");
}

/// Every `println!`, `print!`, `eprintln!` or `eprint!` in product code (the test kit aside):
/// they panic when the stream is closed (`benchctl … | head -1`); the binary prints through
/// its broken-pipe-aware writer and warns with `benchctl_base::stderr_line!`.
fn panicking_prints(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.components().any(|c| c.as_os_str() == "benchctl-testkit")) {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = code_only(&text);
        let tests_at = code.find("mod tests {").unwrap_or(code.len());
        for (n, line) in code[..tests_at].lines().enumerate() {
            if ["println!", "print!", "eprintln!", "eprint!"].iter().any(|m| line.contains(m)) {
                found.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn no_product_code_prints_through_a_panicking_macro() {
    let found = panicking_prints(&source_files());
    assert!(found.is_empty(), "prints that panic on a closed stream:\n{}", found.join("\n"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("printer.rs");
    std::fs::write(&file, "// eprintln! in a comment is fine\nfn f() { eprintln!(\"x\"); }\n")
        .expect("write a source file");
    assert_eq!(panicking_prints(&[file]).len(), 1);
}

#[test]
fn function_lengths_count_from_fn_to_its_brace() {
    let code = code_only("fn a() {\n    let s = \"}\";\n    if x { y }\n}\ntrait T { fn b(&self); }\npub fn c() {}\n");
    let found: Vec<(usize, usize)> = function_lengths(&code).into_iter().map(|(l, n, _)| (l, n)).collect();
    assert_eq!(found, vec![(1, 4), (6, 1)]);
}
