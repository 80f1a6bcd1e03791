//! Guards on the source's arrows: which lines of a module's non-test code
//! name something (a module it must not depend on, a type it must not
//! hold). Tests are excluded: a file's test module, which comes last
//! (clippy's `items_after_test_module`), and the files declared as
//! `#[cfg(test)] mod NAME;`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The lines of `source` before its test module, without
/// `#[cfg(test)] mod NAME;` declarations, and the NAMEs they declare.
#[must_use]
pub fn non_test_code(source: &str) -> (Vec<&str>, Vec<String>) {
    let mut code = Vec::new();
    let mut test_modules = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            code.push(line);
            continue;
        }
        let item = lines.next().unwrap_or_default().trim();
        match item.strip_prefix("mod ") {
            Some(name) if name.ends_with(';') => {
                test_modules.push(name.trim_end_matches(';').to_string());
            }
            Some(_) => break,
            None => code.push(item),
        }
    }
    (code, test_modules)
}

/// The lines (`path: line`) of the non-test code of `path` — one `.rs`
/// file, or every `.rs` file under a directory — that contain one of
/// `needles`.
///
/// # Panics
/// When `path` cannot be read.
#[must_use]
pub fn lines_naming(path: &Path, needles: &[&str]) -> Vec<String> {
    if path.is_file() {
        let text = std::fs::read_to_string(path).expect("read a source file");
        return matching(path, &non_test_code(&text).0, needles);
    }
    let mut sources = BTreeMap::new();
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(path).expect("read the directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            subdirs.push(path);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read a source file");
            sources.insert(path, text);
        }
    }
    let mut test_modules = BTreeSet::new();
    let mut code_of = BTreeMap::new();
    for (path, text) in &sources {
        let (code, tests) = non_test_code(text);
        test_modules.extend(tests);
        code_of.insert(path, code);
    }
    let is_test = |path: &Path| {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        stem.is_some_and(|stem| test_modules.contains(&stem))
    };
    let mut found = Vec::new();
    for (path, code) in code_of.into_iter().filter(|(p, _)| !is_test(p)) {
        found.extend(matching(path, &code, needles));
    }
    subdirs.sort();
    for subdir in subdirs.iter().filter(|p| !is_test(p)) {
        found.extend(lines_naming(subdir, needles));
    }
    found
}

fn matching(path: &Path, code: &[&str], needles: &[&str]) -> Vec<String> {
    code.iter()
        .filter(|line| needles.iter().any(|needle| line.contains(needle)))
        .map(|line| format!("{}: {line}", path.display()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_code_outside_tests_is_seen() {
        let source = "use crate::controller::ControllerHandle;\n\
                      #[cfg(test)]\n\
                      mod damage_tests;\n\
                      fn g(h: &ControllerHandle) {}\n\
                      #[cfg(test)]\n\
                      mod tests {\n    use crate::controller::Key;\n}\n";
        let (code, test_modules) = non_test_code(source);
        let named: Vec<&str> = code
            .into_iter()
            .filter(|l| l.contains("controller::") || l.contains("ControllerHandle"))
            .collect();
        assert_eq!(
            named,
            [
                "use crate::controller::ControllerHandle;",
                "fn g(h: &ControllerHandle) {}"
            ]
        );
        assert_eq!(test_modules, ["damage_tests"]);
    }

    #[test]
    fn test_files_and_test_modules_of_a_directory_are_left_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).expect("write");
        };
        write(
            "mod.rs",
            "use a::b;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline {\n    use a::c;\n}\n",
        );
        write("tests.rs", "use a::d;\n");
        write("other.rs", "fn f() { a::e(); }\n");
        std::fs::create_dir(dir.path().join("tests")).expect("mkdir");
        std::fs::write(dir.path().join("tests/deep.rs"), "use a::f;\n").expect("write");
        let found = lines_naming(dir.path(), &["a::"]);
        let found: Vec<&str> = found
            .iter()
            .map(|hit| hit.rsplit(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(found, ["use a::b;", "fn f() { a::e(); }"]);
    }
}
