//! `cargo xtask deps`: the import graph of a crate's files, and its cycles between folders.
//!
//! How it reads a crate (`core/src`, `host/src`): every `.rs` file is a module (`a/b.rs` and
//! `a/b/mod.rs` are `a::b`; `lib.rs` is the root). In each file, every path that starts with
//! `crate::`, `super::` or `self::`, in a `use` line (groups `{..}` expanded) or anywhere else in
//! the code (`super::Request<'_>` in a signature), is resolved to the longest module prefix
//! that is a file: that file depends on it. Paths inside an inline `mod NAME {` block resolve
//! from that inner module; `#[cfg(test)]` modules are left out (a test may import anything);
//! comments and string literals are ignored.
//!
//! What fails: a cycle of files (a strongly connected component of the file graph) whose files
//! lie in more than one folder. Cycles inside one folder are allowed (a folder is one room:
//! `route/mod.rs` and `route/kind.rs` may name each other). Re-exports count as imports, so a
//! file that imports through a parent's `pub use` depends on that parent: import an item from the
//! file that defines it.
//!
//! The folder graph (a folder depends on another when one of its files imports one of the
//! other's) is printed as layers, bottom first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's files: module path (`["fleet", "sim"]`) -> file (relative to the crate's `src`).
pub type Modules = BTreeMap<Vec<String>, PathBuf>;

/// The module path of a file relative to `src` (None for a binary root, `main.rs`).
pub fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    match last.as_str() {
        "lib.rs" if parts.is_empty() => Some(parts),
        "main.rs" if parts.is_empty() => None,
        "mod.rs" => Some(parts),
        name => {
            parts.push(name.strip_suffix(".rs")?.to_string());
            Some(parts)
        }
    }
}

/// Every `.rs` file below `src`, by module path.
pub fn modules(src: &Path) -> std::io::Result<Modules> {
    let mut out = Modules::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).expect("below src").to_path_buf();
                if let Some(m) = module_of(&rel) {
                    out.insert(m, rel);
                }
            }
        }
    }
    Ok(out)
}

/// The code of `text` without comments and with string and char literals emptied, line by line.
fn code_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block = 0usize; // nesting of /* */ comments
    for line in text.lines() {
        let b = line.as_bytes();
        let mut s = String::with_capacity(line.len());
        let mut i = 0;
        while i < b.len() {
            if block > 0 {
                if b[i..].starts_with(b"*/") {
                    block -= 1;
                    i += 2;
                } else if b[i..].starts_with(b"/*") {
                    block += 1;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            match b[i] {
                b'/' if b.get(i + 1) == Some(&b'/') => break,
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    block += 1;
                    i += 2;
                }
                b'"' => {
                    // skip to the closing quote (escapes honoured); a raw or multi-line string's
                    // rest is skipped on this line only, which is enough for paths
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                    s.push_str("\"\"");
                }
                b'\'' if b.get(i + 2) == Some(&b'\'') || (b.get(i + 1) == Some(&b'\\')) => {
                    // a char literal ('x' or '\n'); a lifetime ('a) has no closing quote
                    i += 1;
                    while i < b.len() && b[i] != b'\'' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                    s.push_str("' '");
                }
                c => {
                    s.push(c as char);
                    i += 1;
                }
            }
        }
        out.push(s);
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e` (a path per leaf; `self` in a
/// group is the prefix itself).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let leaf = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![leaf.trim_end_matches("::self").to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let mut out = Vec::new();
    for p in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        for leaf in expand(p) {
            out.push(if leaf == "self" { prefix.to_string() } else { format!("{prefix}::{leaf}") });
        }
    }
    out
}

/// The paths a file's code names that start with `crate::`, `super::` or `self::`, each with the
/// module it is written in (the file's, or an inline module's inside it).
fn paths_of(text: &str, module: &[String]) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new(); // inline modules open: (name, indent)
    let mut pending_use = String::new();
    let mut skip_test_from: Option<usize> = None; // indent of a #[cfg(test)] module being skipped
    let mut cfg_test = false;
    for line in code_lines(text) {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if let Some(ind) = skip_test_from {
            if t == "}" && indent == ind {
                skip_test_from = None;
            }
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            cfg_test = true;
            continue;
        }
        let is_mod = (t.starts_with("mod ") || t.contains(" mod ")) && t.ends_with('{') && !t.contains("fn ");
        if is_mod {
            if cfg_test {
                skip_test_from = Some(indent);
                cfg_test = false;
                continue;
            }
            let name = t.split_whitespace().skip_while(|w| *w != "mod").nth(1).unwrap_or("").trim_end_matches('{');
            inline.push((name.to_string(), indent));
            continue;
        }
        if !t.starts_with("#[") {
            cfg_test = false;
        }
        if t == "}" && inline.last().is_some_and(|(_, ind)| *ind == indent) {
            inline.pop();
            continue;
        }
        let mut here = module.to_vec();
        here.extend(inline.iter().map(|(n, _)| n.clone()));
        // `use` statements, possibly over several lines
        let vis_stripped = match t.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => rest.split_once(')').map_or(rest, |(_, r)| r).trim_start(),
            Some(rest) => rest.trim_start(),
            None => t,
        };
        let is_use = vis_stripped.starts_with("use ");
        if is_use || !pending_use.is_empty() {
            pending_use.push_str(t);
            pending_use.push(' ');
            if t.ends_with(';') {
                let body = pending_use.trim().trim_end_matches(';');
                let body = body.split_once("use ").map_or(body, |(_, b)| b);
                for p in expand(body) {
                    out.push((here.clone(), p));
                }
                pending_use.clear();
            }
            continue;
        }
        // paths in code: crate::a::b, super::x, self::y
        for start in ["crate::", "super::", "self::"] {
            let mut from = 0;
            while let Some(i) = t[from..].find(start) {
                let at = from + i;
                let before_ok = at == 0
                    || !t.as_bytes()[at - 1].is_ascii_alphanumeric()
                        && t.as_bytes()[at - 1] != b'_'
                        && t.as_bytes()[at - 1] != b':';
                let path: String =
                    t[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
                if before_ok {
                    out.push((here.clone(), path.trim_end_matches(':').to_string()));
                }
                from = at + start.len();
            }
        }
    }
    out
}

/// The module a path names, from the module it is written in: `crate::a::b` -> `a::b`, `super::x`
/// -> parent + `x`, `self::y` and `y` (a child module of `here`) -> current + `y`. None for other
/// roots (an external crate).
fn absolute(path: &str, here: &[String], mods: &Modules) -> Option<Vec<String>> {
    let mut segs = path.split("::").filter(|s| !s.is_empty());
    let first = segs.next()?;
    let mut base: Vec<String> = match first {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => {
            let mut b = here.to_vec();
            b.pop();
            b
        }
        child => {
            let mut b = here.to_vec();
            b.push(child.to_string());
            if !mods.contains_key(&b) {
                return None;
            }
            b
        }
    };
    for s in segs {
        if s == "super" {
            base.pop();
        } else {
            base.push(s.to_string());
        }
    }
    Some(base)
}

/// The file graph of a crate: file -> the files it depends on (itself excluded).
pub fn graph(src: &Path) -> std::io::Result<BTreeMap<PathBuf, BTreeSet<PathBuf>>> {
    let mods = modules(src)?;
    let mut g: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(src.join(file))?;
        let deps = g.entry(file.clone()).or_default();
        for (here, p) in paths_of(&text, m) {
            let Some(mut abs) = absolute(&p, &here, &mods) else { continue };
            while !abs.is_empty() && !mods.contains_key(&abs) {
                abs.pop();
            }
            if let Some(target) = mods.get(&abs)
                && target != file
            {
                deps.insert(target.clone());
            }
        }
    }
    Ok(g)
}

/// The strongly connected components of `g` with more than one node (Tarjan).
pub fn cycles<N: Ord + Clone>(g: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct T<'g, N> {
        g: &'g BTreeMap<N, BTreeSet<N>>,
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on: BTreeSet<N>,
        next: usize,
        out: Vec<Vec<N>>,
    }
    impl<N: Ord + Clone> T<'_, N> {
        fn visit(&mut self, v: &N) {
            self.index.insert(v.clone(), self.next);
            self.low.insert(v.clone(), self.next);
            self.next += 1;
            self.stack.push(v.clone());
            self.on.insert(v.clone());
            let empty = BTreeSet::new();
            for w in self.g.get(v).unwrap_or(&empty) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(&w);
                    let done = w == *v;
                    comp.push(w);
                    if done {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// The folder of a file (`fleet/sim/mod.rs` -> `fleet/sim`).
pub fn folder(file: &Path) -> PathBuf {
    file.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Cycles of files that cross folders (the check's failures).
pub fn cross_folder_cycles(g: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    cycles(g).into_iter().filter(|c| c.iter().map(|f| folder(f)).collect::<BTreeSet<_>>().len() > 1).collect()
}

/// The folder graph: folder -> folders its files import (itself excluded).
pub fn folder_graph(g: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut f: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (a, deps) in g {
        let fa = folder(a);
        let e = f.entry(fa.clone()).or_default();
        for b in deps {
            let fb = folder(b);
            if fb != fa {
                e.insert(fb);
            }
        }
    }
    f
}

/// Runs the check on each crate source directory; prints the folder layers and every cycle.
/// Returns false when a cycle crosses folders.
pub fn check(roots: &[PathBuf]) -> std::io::Result<bool> {
    let mut ok = true;
    for src in roots {
        let g = graph(src)?;
        let edges: usize = g.values().map(BTreeSet::len).sum();
        println!("{}: {} files, {} imports between files", src.display(), g.len(), edges);
        let fg = folder_graph(&g);
        let folder_cycles = cycles(&fg);
        // Layers: a folder's layer is one above the highest layer it imports (folders in a cycle
        // share a layer).
        let mut layer: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for _ in 0..fg.len() {
            for (a, deps) in &fg {
                let l = deps
                    .iter()
                    .filter(|d| !folder_cycles.iter().any(|c| c.contains(a) && c.contains(d)))
                    .map(|d| layer.get(d).map_or(1, |l| l + 1))
                    .max()
                    .unwrap_or(0);
                layer.insert(a.clone(), l);
            }
        }
        let top = layer.values().copied().max().unwrap_or(0);
        for l in 0..=top {
            let names: Vec<String> =
                layer.iter().filter(|(_, v)| **v == l).map(|(k, _)| format!("{}/", k.display())).collect();
            println!("  layer {l}: {}", names.join(" "));
        }
        for c in &folder_cycles {
            let names: Vec<String> = c.iter().map(|f| format!("{}/", f.display())).collect();
            println!("  folders that import each other (through files that do not cycle): {}", names.join(" <-> "));
        }
        for c in cross_folder_cycles(&g) {
            ok = false;
            let names: Vec<String> = c.iter().map(|f| f.display().to_string()).collect();
            println!("  CYCLE across folders: {}", names.join(", "));
            for a in &c {
                for b in &g[a] {
                    if c.contains(b) {
                        println!("    {} -> {}", a.display(), b.display());
                    }
                }
            }
        }
    }
    println!("{}", if ok { "deps: no import cycle between files of different folders" } else { "deps: FAILED" });
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-deps-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn groups_expand_to_one_path_per_leaf() {
        assert_eq!(expand("super::{a, b::{c, d as e}, self}"), ["super::a", "super::b::c", "super::b::d", "super"]);
        assert_eq!(expand("crate::x::Y"), ["crate::x::Y"]);
    }

    #[test]
    fn a_cycle_across_folders_fails_and_one_inside_a_folder_does_not() {
        let dir = tree(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a/mod.rs", "pub mod x;\npub use self::x::X;\n"),
            // a/x.rs <-> a/mod.rs: one folder, allowed
            ("a/x.rs", "use super::Y;\npub struct X;\n"),
            // b/mod.rs -> a/x.rs, and a/x.rs -> ... not back: no cycle yet
            ("b/mod.rs", "use crate::a::x::X; // crate::b is not named here\nfn f() -> super::a::X { todo!() }\n"),
        ]);
        let g = graph(&dir).unwrap();
        assert!(g[Path::new("b/mod.rs")].contains(Path::new("a/x.rs")));
        assert!(g[Path::new("b/mod.rs")].contains(Path::new("a/mod.rs")), "a path in a signature counts");
        assert_eq!(cycles(&g).len(), 1, "{g:?}");
        assert!(cross_folder_cycles(&g).is_empty());
        // now a/x.rs imports b: a cycle through two folders
        std::fs::write(dir.join("a/x.rs"), "use super::Y;\nuse crate::b::{\n    Z,\n};\npub struct X;\n").unwrap();
        let g = graph(&dir).unwrap();
        let bad = cross_folder_cycles(&g);
        assert_eq!(bad.len(), 1, "{g:?}");
        assert!(bad[0].contains(&PathBuf::from("b/mod.rs")));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn comments_strings_tests_and_inline_modules() {
        let dir = tree(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "a.rs",
                "// use crate::b;\nconst S: &str = \"crate::b::X\";\npub mod inner {\n    use super::super::b::X;\n}\n#[cfg(test)]\nmod tests {\n    use crate::b::X;\n}\n",
            ),
            ("b.rs", "pub struct X;\n"),
        ]);
        let g = graph(&dir).unwrap();
        // only the inline module's import counts, resolved from a::inner
        assert_eq!(g[Path::new("a.rs")], BTreeSet::from([PathBuf::from("b.rs")]));
        std::fs::write(
            dir.join("a.rs"),
            "// use crate::b;\nconst S: &str = \"crate::b::X\";\n#[cfg(test)]\nmod tests {\n    use crate::b::X;\n}\n",
        )
        .unwrap();
        assert!(graph(&dir).unwrap()[Path::new("a.rs")].is_empty());
        std::fs::remove_dir_all(dir).ok();
    }
}
