//! The host's modules form no import cycle (issue 39); [`KNOWN`] lists any that must be lived
//! with for a while, and only shrinks. A cycle between modules means neither can be understood,
//! tested or moved without the other; the next kind and the next capability would have to be
//! threaded through both.
//!
//! The graph is read from the source: every `crate::`, `super::` and `self::` path in `use`
//! items and in code, resolved to the module it names. Modules deeper than two levels count as
//! their two-level ancestor (`plugin::source::oci` is `plugin::source`), and a module's
//! references to its ancestors or descendants are structure, not dependencies. Print the graph
//! with `cargo test -p wasmop-host --test module_cycles -- --nocapture`.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// The cycles (strongly connected components) known today, each sorted; the test fails if one
/// grows or a new one appears, and says when one is gone so the list can shrink.
const KNOWN: &[&[&str]] = &[];

#[test]
fn the_host_has_no_new_import_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = modules(&src);
    let known: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &files {
        let from = node(module);
        graph.entry(from.clone()).or_default();
        for path in references(module, text) {
            let Some(target) = resolve(&path, &known) else {
                continue;
            };
            let to = node(&target);
            if from != to && !related(&from, &to) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    for (from, to) in &graph {
        println!(
            "{from} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let cycles = components(&graph);
    for cycle in &cycles {
        println!("cycle: {}", cycle.join(" <-> "));
    }
    let known_cycles: Vec<Vec<String>> = KNOWN
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    let new: Vec<&Vec<String>> = cycles
        .iter()
        .filter(|c| !known_cycles.iter().any(|k| c.iter().all(|m| k.contains(m))))
        .collect();
    assert!(
        new.is_empty(),
        "new or grown import cycles in the host: {new:?}"
    );
    let gone: Vec<&Vec<String>> = known_cycles
        .iter()
        .filter(|k| !cycles.iter().any(|c| c == *k))
        .collect();
    assert!(
        gone.is_empty(),
        "known cycles that are gone or smaller: shrink KNOWN to what is printed: {gone:?}"
    );
}

/// Every module of the library (not `main.rs`) by path (`plugin::source::oci`), with its
/// source.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("host/src is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = relative
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            match parts.last().map(String::as_str) {
                Some("main") if parts.len() == 1 => continue,
                Some("lib" | "mod") => {
                    parts.pop();
                }
                _ => {}
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.insert(parts.join("::"), text);
        }
    }
    out
}

/// The node a module counts as: itself, or its ancestor two levels down.
fn node(module: &str) -> String {
    module.split("::").take(2).collect::<Vec<_>>().join("::")
}

/// Whether one module is the other's ancestor (or they are the same).
fn related(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
    };
    within(a, b) || within(b, a)
}

/// The longest module that `path` (absolute, `a::b::Item`) names or is inside of.
fn resolve(path: &[String], known: &BTreeSet<&str>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| known.contains(candidate.as_str()))
}

/// Every absolute module path `module`'s source refers to through `crate::`, `super::` or
/// `self::`, from `use` trees and from paths in code.
fn references(module: &str, code: &str) -> Vec<Vec<String>> {
    let here: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut out = Vec::new();
    let tokens = tokenize(code);
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let mut j = i + 1;
            let mut paths = Vec::new();
            use_tree(&tokens, &mut j, Vec::new(), &mut paths);
            out.extend(paths.into_iter().filter_map(|p| absolute(&here, &p)));
            i = j;
            continue;
        }
        if matches!(tokens[i].as_str(), "crate" | "super" | "self")
            && tokens.get(i + 1).is_some_and(|t| t == "::")
        {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|t| t == "::")
                && tokens.get(j + 1).is_some_and(|t| is_ident(t))
            {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            out.extend(absolute(&here, &path));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Reads one `use` tree from `tokens[*at]` on, appending each full path to `out`.
fn use_tree(tokens: &[String], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    while let Some(token) = tokens.get(*at) {
        match token.as_str() {
            "::" => *at += 1,
            "{" => {
                *at += 1;
                loop {
                    match tokens.get(*at).map(String::as_str) {
                        None => return,
                        Some("}") => {
                            *at += 1;
                            return;
                        }
                        Some(",") => *at += 1,
                        Some(_) => use_tree(tokens, at, path.clone(), out),
                    }
                }
            }
            "as" => *at += 2,
            ";" | "," | "}" => {
                if token == ";" {
                    *at += 1;
                }
                out.push(path);
                return;
            }
            "*" => *at += 1,
            ident => {
                path.push(ident.to_string());
                *at += 1;
            }
        }
    }
}

/// `path` as seen from the module `here`, from the crate root; `None` for paths into other
/// crates.
fn absolute(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => here.to_vec(),
        Some("super") => here.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop()?;
    }
    while rest.first().is_some_and(|p| p == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers, `::` and single punctuation; comments, string and char literals dropped.
fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or(' ');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && at(i + 1) == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r'
            && (at(i + 1) == '"' || (at(i + 1) == '#' && matches!(at(i + 2), '"' | '#')))
            && !(i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // A raw string: r"..." or r#"..."#, which may hold quotes.
            let mut hashes = 0;
            i += 1;
            while at(i) == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('x', '\n', '\'') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// The strongly connected components of more than one node (Tarjan), each sorted.
fn components(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges: Vec<&'a str> = s
            .graph
            .get(v)
            .map(|e| e.iter().map(String::as_str).collect())
            .unwrap_or_default();
        for w in edges {
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
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out.sort();
    state.out
}
