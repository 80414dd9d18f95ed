use super::*;
use crate::core::exact::config::{BandConfig, Ratio};
use std::os::unix::fs::PermissionsExt;

fn config(burst: u64) -> Config {
    let band = BandConfig::new(Ratio::new(10, 1).unwrap(), Some(burst), None).unwrap();
    Config::new(vec![band]).unwrap()
}

fn folder(test: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("qos-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

fn open_one(
    folder: &Path,
    name: &str,
    config: &Config,
    max_keys: Option<u64>,
) -> Result<(Table<Mapped>, PathBuf), OpenError> {
    open(folder, name, &[(config, max_keys)], || (1, 2)).map(|mut opened| opened.remove(0))
}

#[test]
fn two_opens_share_one_table_and_the_file_is_private() {
    let folder = folder("share");
    let (first, path) = open_one(&folder, "api", &config(5), Some(10)).unwrap();
    let (second, _) = open_one(&folder, "api", &config(5), Some(10)).unwrap();
    let digest = first.digest(b"k");
    assert_eq!(second.digest(b"k"), digest);
    assert_eq!(first.identity(), second.identity(), "one file, one table");
    first.check(digest, 5, 0);
    assert_eq!(second.available(digest, 0), 0);
    let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn another_configuration_is_another_file_and_unused_ones_are_removed() {
    let folder = folder("deploy");
    let (old, old_path) = open_one(&folder, "api", &config(5), Some(10)).unwrap();
    let (_, new_path) = open_one(&folder, "api", &config(6), Some(10)).unwrap();
    assert_ne!(old_path, new_path);
    assert!(old_path.exists(), "a table in use is never removed");
    drop(old);
    let (_, again) = open_one(&folder, "api", &config(6), Some(10)).unwrap();
    assert_eq!(again, new_path);
    assert!(!old_path.exists(), "nobody held the old one");
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn the_tables_of_one_limiter_are_one_set_and_other_names_are_never_removed() {
    let folder = folder("set");
    let mut paths = Vec::new();
    for name in ["api.keys", "api.one", "api.keystone", "api.keys2"] {
        paths.push(open_one(&folder, name, &config(5), Some(10)).unwrap().1);
    }
    let plans = [(&config(5), Some(10)), (&config(6), Some(10))];
    let opened = open(&folder, "api", &plans, || (1, 2)).unwrap();
    paths.extend(opened.into_iter().map(|(_, path)| path));
    // Nobody holds any of them now: opening the plans again, one set, removes none.
    let opened = open(&folder, "api", &plans, || (1, 2)).unwrap();
    assert_eq!(opened.len(), 2);
    for path in &paths {
        assert!(path.exists(), "{} was removed", path.display());
    }
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn a_file_name_is_read_by_its_whole_grammar() {
    let table = |name: &str| {
        let path = table_path(Path::new("/x"), name, &config(5), Some(10)).unwrap();
        path.file_name().unwrap().to_str().unwrap().to_owned()
    };
    for name in [
        "api",
        "api.keys",
        "api.one",
        "api.keys2.one",
        "v2",
        "a.0123456789abcdef",
    ] {
        assert_eq!(table_name_of(&table(name)), Some(name));
        let draft = draft_path(Path::new(&table(name)), 0xbeef);
        assert_eq!(table_name_of(draft.to_str().unwrap()), Some(name));
    }
    // The layout before version 2: no version in the name.
    let old = "protocol-in-code-qos.api.keys.one.0123456789abcdef.table";
    assert_eq!(table_name_of(old), Some("api.keys"));
    for other in [
        "protocol-in-code-qos.api.table",
        "protocol-in-code-qos.api.keysx.0123456789abcdef.table",
        "protocol-in-code-qos.api.one.0123.table",
        "something-else.api.one.0123456789abcdef.table",
    ] {
        assert_eq!(table_name_of(other), None, "{other}");
    }
}

#[test]
fn a_file_open_to_others_or_a_link_is_refused_and_never_used() {
    let folder = folder("mode");
    let (table, path) = open_one(&folder, "t", &config(5), None).unwrap();
    drop(table);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = open_one(&folder, "t", &config(5), None).err().unwrap();
    assert!(matches!(error, OpenError::NotOurs { .. }), "{error}");
    assert!(error.to_string().contains("0o644"), "{error}");
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/null", &path).unwrap();
    let error = open_one(&folder, "t", &config(5), None).err().unwrap();
    assert!(error.to_string().contains("symbolic link"), "{error}");
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn a_table_of_another_boot_is_replaced_by_a_whole_copy_on_this_boots_clock() {
    let folder = folder("boot");
    if host::boot_number() == 0 {
        return; // no boot to tell apart
    }
    let (table, path) = open_one(&folder, "t", &config(5), Some(10)).unwrap();
    let digest = table.digest(b"k");
    let far = host::monotonic_ns() + 1_000_000_000_000;
    table.check(digest, 5, far); // spent, a thousand seconds ahead of this clock
    let words = table.words();
    words[8].store(1, std::sync::atomic::Ordering::Relaxed); // "another boot"
    drop(table);
    let (moved, again) = open_one(&folder, "t", &config(5), Some(10)).unwrap();
    assert_eq!(again, path);
    assert_eq!(moved.boot(), host::boot_number());
    // Moved to this clock: still spent now, as it was at its last call.
    assert_eq!(moved.available(digest, host::monotonic_ns()), 0);
    let leftovers: Vec<_> = std::fs::read_dir(&folder).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "the copy replaced the old file");
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn bad_names_and_bad_files_are_refused() {
    let folder = folder("bad");
    for name in ["", ".hidden", "a/b", "a b", &"x".repeat(101)] {
        assert!(matches!(
            open_one(&folder, name, &config(5), None),
            Err(OpenError::Name(_))
        ));
    }
    let path = table_path(&folder, "t", &config(5), None).unwrap();
    for bytes in [vec![], vec![0; 7], vec![0; 64], b"QOSTABLE".repeat(40)] {
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = open_one(&folder, "t", &config(5), None).err().unwrap();
        assert!(matches!(error, OpenError::Layout(..)), "{error}");
    }
    std::fs::remove_dir_all(folder).unwrap();
}

#[test]
fn the_host_secret_is_made_once_read_alike_and_checked() {
    let folder = folder("secret");
    let first = host_secret(&folder).unwrap();
    assert_eq!(host_secret(&folder).unwrap(), first, "read alike");
    assert_ne!(first, [0; SECRET_BYTES]);
    let path = folder.join("protocol-in-code-qos.secret");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    let only_it = std::fs::read_dir(&folder).unwrap().count();
    assert_eq!(only_it, 1, "no draft left behind");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        host_secret(&folder),
        Err(OpenError::NotOurs { .. })
    ));
    std::fs::write(&path, b"short").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let error = host_secret(&folder).unwrap_err().to_string();
    assert!(error.contains("remove it"), "{error}");
    std::fs::remove_file(&path).unwrap();
    assert_ne!(
        host_secret(&folder).unwrap(),
        first,
        "a new secret once removed"
    );
}
