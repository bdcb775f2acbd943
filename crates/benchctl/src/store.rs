//! The results store: one SQLite database, `results/benchctl.sqlite` (rusqlite with its
//! bundled SQLite, nothing to install), holding every run with its metrics, their bootstrap
//! intervals and the per-item scores. The JSON run files are an export of the same data.
//!
//! - **Schema versioned**: `PRAGMA user_version` is the number of applied [`MIGRATIONS`];
//!   opening a store applies the missing ones in one transaction, so an older store is
//!   upgraded in place and a newer one (from a later benchctl) is refused, not misread.
//! - **Concurrent writers**: WAL journal and a 60 s busy timeout; each run is inserted in one
//!   `BEGIN IMMEDIATE` transaction, so two processes writing at once serialise.
//! - **A run is stored all or nothing**: its run file and score dump are written first
//!   (temporary name, fsync, rename), then one transaction inserts the row that names them
//!   (`run_file`, unique). A crash between the two leaves complete files without a row:
//!   opening the store finishes the job (the files are imported, once), and removes the
//!   `.partial` leftovers of an interrupted write and a score dump whose run file was never
//!   written. A crash inside the transaction rolls it back.
//! - **Readers are lenient, writers strict**: [`Store::runs_readable`] skips (and names) a row
//!   it cannot read; [`Store::open_existing`] refuses a directory without a store rather than
//!   creating an empty one.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::results::Run;
use crate::{Error, ErrorKind, Result};

/// The database file under a results directory.
pub const FILE_NAME: &str = "benchctl.sqlite";

/// Each migration brings the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: runs, their metrics with intervals, and per-item scores.
    "CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        started_at TEXT NOT NULL,
        tool_version TEXT NOT NULL,
        tool_commit TEXT NOT NULL,
        model_id TEXT NOT NULL,
        score_head TEXT,
        repo TEXT,
        revision TEXT,
        hub_commit TEXT,
        model_path TEXT,
        dtype TEXT NOT NULL,
        device TEXT NOT NULL,
        suite_id TEXT NOT NULL,
        data_dir TEXT NOT NULL,
        items INTEGER NOT NULL,
        data_fingerprint TEXT NOT NULL,
        shard TEXT,
        run_json TEXT NOT NULL
    );
    CREATE INDEX runs_by_model_suite ON runs (model_id, suite_id, started_at);
    CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value REAL NOT NULL,
        ci_low REAL,
        ci_high REAL,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE item_scores (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (run_id, position)
    );",
    // 2: the run file each row was exported to (NULL for rows stored before), unique.
    "ALTER TABLE runs ADD COLUMN run_file TEXT;
    CREATE UNIQUE INDEX runs_by_file ON runs (run_file) WHERE run_file IS NOT NULL;",
];

fn db_error(path: &Path, what: &str) -> impl Fn(rusqlite::Error) -> Error {
    let (what, path) = (what.to_string(), path.to_path_buf());
    move |e| {
        // SQLite reports a full disk as "disk is full" or, when it cannot grow its WAL index,
        // as a bare "disk I/O error": say how much room is left, which is usually the cause.
        let io =
            matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::SystemIoFailure));
        let room = match path.parent().and_then(free_bytes) {
            Some(free) if io => format!(" ({free} bytes free on its filesystem)"),
            _ => String::new(),
        };
        Error::results(format!("{what} in {}: {e}{room}", path.display()))
    }
}

/// Bytes available to this user on the filesystem holding `dir`.
#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `dir` is a NUL-terminated path and `stat` is written by statvfs before it is read.
    let stat = unsafe {
        if libc::statvfs(dir.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

/// An open results store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// The results directory's lock (`benchctl.lock`), held while the store is open.
    _lock: Option<std::fs::File>,
}

/// How long opening a store waits for another process that holds it (as SQLite's busy timeout).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Takes the results directory's lock. A process storing a run writes its run files and then
/// the row naming them, and recovery on opening imports run files without a row and removes
/// `.partial` files: without one writer at a time, one process's recovery would remove or
/// import the files another is still writing (two runs started in the same second also
/// picked the same file names). Waits up to [`LOCK_WAIT`]; where the filesystem has no
/// locks, goes on without one, with a warning.
fn lock(results_dir: &Path) -> Result<Option<std::fs::File>> {
    let path = results_dir.join("benchctl.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::results(format!("open {}: {e}", path.display())))?;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(25))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::bad_results(format!(
                    "lock {}: another benchctl has held it for {} s",
                    path.display(),
                    LOCK_WAIT.as_secs()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                benchctl_base::stderr_line!(
                    "warning: cannot lock {} ({e}); concurrent writers are not serialised",
                    path.display()
                );
                return Ok(None);
            }
        }
    }
}

/// A stored run: its id, the run, and where its item scores are.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub id: i64,
    pub run: Run,
    /// The run file's name under `runs/` (absent for rows stored without one).
    pub run_file: Option<String>,
}

impl Store {
    /// Opens (creating if needed) the store in `results_dir`, migrating it to the current
    /// schema, and finishes what a crash left in `results_dir/runs` (see the module docs).
    pub fn open(results_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(results_dir)
            .map_err(|e| Error::results(format!("create results directory {}: {e}", results_dir.display())))?;
        let lock = lock(results_dir)?;
        let mut store = Self::open_file(&results_dir.join(FILE_NAME))?;
        store._lock = lock;
        store.recover(&results_dir.join("runs"))?;
        Ok(store)
    }

    /// Opens the store in `results_dir` for reading: a directory with neither a store nor run
    /// files is an error (a mistyped `--results-dir` must not look like an empty
    /// leaderboard). Run files alone (a clone of a repository that commits `runs/` but not the
    /// database) rebuild the store.
    pub fn open_existing(results_dir: &Path) -> Result<Self> {
        let has_runs = std::fs::read_dir(results_dir.join("runs"))
            .map(|d| d.filter_map(|e| e.ok()).any(|e| e.file_name().to_string_lossy().ends_with(".json")))
            .unwrap_or(false);
        if !results_dir.join(FILE_NAME).is_file() && !has_runs {
            return Err(Error::bad_results(format!(
                "find the results store {}: there is none (run `benchctl eval` with this --results-dir first)",
                results_dir.join(FILE_NAME).display()
            )));
        }
        Self::open(results_dir)
    }

    /// Imports run files that have no row (a crash after writing them, before the commit)
    /// and removes `.partial` files and score dumps without a run file (a crash while writing
    /// them). A file that cannot be read
    /// is left alone, with a warning. Rows stored before run files were recorded adopt
    /// their file (same start, model, suite and shard) instead of being imported twice.
    fn recover(&mut self, runs_dir: &Path) -> Result<()> {
        let Ok(entries) = std::fs::read_dir(runs_dir) else { return Ok(()) };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            // A crash while writing a file, or between a run's score dump and its run file
            // (written in that order, under the lock): neither is part of any run.
            let orphan_dump =
                name.strip_suffix(".scores.jsonl").is_some_and(|stem| !runs_dir.join(format!("{stem}.json")).exists());
            if name.ends_with(".partial") || orphan_dump {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if !name.ends_with(".json") || self.has_run_file(&name)? {
                continue;
            }
            let imported = crate::results::read_run_file(&path).and_then(|file| {
                let dump =
                    file.dump.as_deref().ok_or_else(|| Error::bad_results("it names no score dump".to_string()))?;
                self.adopt_or_insert(&file.run, dump, &name)
            });
            match imported {
                Ok(true) => {
                    benchctl_base::stderr_line!(
                        "note: imported {} into the results store (a run stored by files only)",
                        path.display()
                    )
                }
                Ok(false) => {}
                Err(e) => benchctl_base::stderr_line!("warning: left {} out of the results store: {e}", path.display()),
            }
        }
        Ok(())
    }

    /// The run file recorded for each row (`None` for rows stored before they were recorded).
    pub fn run_files(&self) -> Result<Vec<Option<String>>> {
        let mut stmt = self
            .conn
            .prepare("SELECT run_file FROM runs ORDER BY id")
            .map_err(db_error(&self.path, "list run files"))?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(db_error(&self.path, "list run files"))?;
        rows.collect::<std::result::Result<_, _>>().map_err(db_error(&self.path, "list run files"))
    }

    fn has_run_file(&self, name: &str) -> Result<bool> {
        self.conn
            .query_row("SELECT 1 FROM runs WHERE run_file = ?1", [name], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .map_err(db_error(&self.path, "look up a run file"))
    }

    /// Records `run_file` on a row stored before files were recorded, or inserts the run with
    /// its dump's lines; `true` when it inserted. Either way the dump is read once, and one that
    /// is not readable JSON throughout adopts and stores nothing.
    fn adopt_or_insert(&mut self, run: &Run, dump: &Path, run_file: &str) -> Result<bool> {
        let adoptable: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM runs WHERE run_file IS NULL AND started_at = ?1 AND model_id = ?2 AND suite_id = ?3
                 AND shard IS ?4 ORDER BY id LIMIT 1",
                params![run.started_at, run.model.id, run.suite.id, run.shard],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_error(&self.path, "look for a run to adopt"))?;
        let Some(id) = adoptable else {
            self.insert(run, crate::results::dump_lines(dump)?, Some(run_file))?;
            return Ok(true);
        };
        crate::results::dump_lines(dump)?.try_for_each(|line| line.map(drop))?;
        self.conn
            .execute("UPDATE runs SET run_file = ?1 WHERE id = ?2", params![run_file, id])
            .map_err(db_error(&self.path, "adopt a run file"))?;
        Ok(false)
    }

    pub fn open_file(path: &Path) -> Result<Self> {
        let conn = Connection::open(path).map_err(db_error(path, "open the results store"))?;
        conn.busy_timeout(std::time::Duration::from_secs(60)).map_err(db_error(path, "configure the results store"))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db_error(path, "configure the results store"))?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(db_error(path, "configure the results store"))?;
        let mut store = Self { conn, path: path.to_path_buf(), _lock: None };
        store.migrate()?;
        Ok(store)
    }

    /// The schema version of the open store.
    pub fn version(&self) -> Result<usize> {
        let v: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db_error(&self.path, "read the schema version"))?;
        Ok(v as usize)
    }

    fn migrate(&mut self) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_error(&path, "start a migration"))?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db_error(&path, "read the schema version"))?;
        let version = version as usize;
        if version > MIGRATIONS.len() {
            return Err(Error::results(format!(
                "use the results store {}: its schema version {version} is newer than this benchctl's {}",
                path.display(),
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(sql).map_err(db_error(&path, &format!("migrate the schema to version {}", i + 1)))?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(db_error(&path, "record the schema version"))?;
        }
        tx.commit().map_err(db_error(&path, "commit a migration"))
    }

    /// Inserts a run, its metrics with intervals and its item scores in one transaction,
    /// with the name of the run file (under `runs/`) it was exported to; returns the run's id.
    /// A line that is an error (a dump read as it is stored) stores nothing and is returned.
    pub fn insert(
        &mut self,
        run: &Run,
        item_lines: impl IntoIterator<Item = Result<impl std::fmt::Display>>,
        run_file: Option<&str>,
    ) -> Result<i64> {
        let path = self.path.clone();
        let err = |what: &str| db_error(&path, what);
        let tx =
            self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err("start storing a run"))?;
        let m = &run.model;
        tx.execute(
            "INSERT INTO runs (started_at, tool_version, tool_commit, model_id, score_head, repo, revision, hub_commit,
                model_path, dtype, device, suite_id, data_dir, items, data_fingerprint, shard, run_json, run_file)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            params![
                run.started_at,
                env!("CARGO_PKG_VERSION"),
                run.tool_commit,
                m.id,
                m.score,
                m.repo,
                m.revision,
                m.commit,
                m.path,
                m.dtype,
                m.device,
                run.suite.id,
                run.suite.data_dir,
                run.suite.items as i64,
                run.data_fingerprint,
                run.shard,
                run.to_json().to_string(),
                run_file,
            ],
        )
        .map_err(err("store a run"))?;
        let id = tx.last_insert_rowid();
        {
            let mut metric = tx
                .prepare("INSERT INTO metrics (run_id, name, value, ci_low, ci_high) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(err("store metrics"))?;
            for (name, value) in &run.report.metrics {
                let ci = run.interval(name);
                metric
                    .execute(params![id, name, value, ci.map(|i| i.low), ci.map(|i| i.high)])
                    .map_err(err("store metrics"))?;
            }
            let mut line = tx
                .prepare("INSERT INTO item_scores (run_id, position, line) VALUES (?1, ?2, ?3)")
                .map_err(err("store item scores"))?;
            for (position, l) in item_lines.into_iter().enumerate() {
                line.execute(params![id, position as i64, l?.to_string()]).map_err(err("store item scores"))?;
                crate::fault::at("store-item", position);
            }
        }
        tx.commit().map_err(err("commit a run"))?;
        Ok(id)
    }

    /// Every stored run, oldest first; a row that cannot be read is an error.
    pub fn runs(&self) -> Result<Vec<StoredRun>> {
        let (runs, skipped) = self.runs_readable()?;
        match skipped.into_iter().next() {
            Some(problem) => Err(Error::bad_results(problem)),
            None => Ok(runs),
        }
    }

    /// Every stored run that can be read, oldest first, and a line naming each row that
    /// cannot (a reader such as `leaderboard` goes on without it).
    pub fn runs_readable(&self) -> Result<(Vec<StoredRun>, Vec<String>)> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, run_json, run_file FROM runs ORDER BY started_at, id")
            .map_err(db_error(&self.path, "list runs"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?)))
            .map_err(db_error(&self.path, "list runs"))?;
        let (mut runs, mut skipped) = (Vec::new(), Vec::new());
        for row in rows {
            match row
                .map_err(db_error(&self.path, "read a run"))
                .and_then(|(id, json, run_file)| Ok((id, self.parse(id, &json)?, run_file)))
            {
                Ok((id, run, run_file)) => runs.push(StoredRun { id, run, run_file }),
                Err(e) => skipped.push(e.to_string()),
            }
        }
        Ok((runs, skipped))
    }

    /// The run with this id.
    pub fn run(&self, id: i64) -> Result<StoredRun> {
        let row: Option<(String, Option<String>)> = self
            .conn
            .query_row("SELECT run_json, run_file FROM runs WHERE id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(db_error(&self.path, "read a run"))?;
        let (json, run_file) = row.ok_or_else(|| {
            Error::bad_results(format!("find run {id} in {}: there is no such run", self.path.display()))
        })?;
        Ok(StoredRun { id, run: self.parse(id, &json)?, run_file })
    }

    /// The latest run of a model (by run record id) on a suite.
    /// The latest complete run of this identity ([`Run::identity`]: model, head, dtype, suite,
    /// tie rule; shard runs are never it).
    pub fn latest_of(
        &self,
        identity: &crate::results::RunIdentity,
        model_id: &str,
        suite_id: &str,
    ) -> Result<Option<StoredRun>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM runs WHERE model_id = ?1 AND suite_id = ?2 AND shard IS NULL ORDER BY started_at DESC, id DESC")
            .map_err(db_error(&self.path, "find the latest run"))?;
        let ids: Vec<i64> = stmt
            .query_map([model_id, suite_id], |r| r.get(0))
            .map_err(db_error(&self.path, "find the latest run"))?
            .collect::<std::result::Result<_, _>>()
            .map_err(db_error(&self.path, "find the latest run"))?;
        for id in ids {
            let run = self.run(id)?;
            if &run.run.identity() == identity && run.run.is_complete() {
                return Ok(Some(run));
            }
        }
        Ok(None)
    }

    pub fn latest(&self, model_id: &str, suite_id: &str) -> Result<Option<StoredRun>> {
        let id: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM runs WHERE model_id = ?1 AND suite_id = ?2 ORDER BY started_at DESC, id DESC LIMIT 1",
                [model_id, suite_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_error(&self.path, "find the latest run"))?;
        id.map(|id| self.run(id)).transpose()
    }

    /// A run's item score lines, in item order.
    pub fn item_lines(&self, id: i64) -> Result<Vec<serde_json::Value>> {
        let mut stmt = self
            .conn
            .prepare("SELECT line FROM item_scores WHERE run_id = ?1 ORDER BY position")
            .map_err(db_error(&self.path, "read item scores"))?;
        let rows = stmt.query_map([id], |r| r.get::<_, String>(0)).map_err(db_error(&self.path, "read item scores"))?;
        rows.map(|r| {
            let text = r.map_err(db_error(&self.path, "read item scores"))?;
            serde_json::from_str(&text).map_err(|e| {
                Error::bad_results(format!("parse an item score line of run {id} in {}: {e}", self.path.display()))
            })
        })
        .collect()
    }

    /// A run's item scores, in item order, read row by row into spilled arrays (what
    /// `compare` holds of a stored run).
    pub fn item_scores(&self, id: i64) -> Result<crate::dump::DumpScores> {
        let mut stmt = self
            .conn
            .prepare("SELECT line FROM item_scores WHERE run_id = ?1 ORDER BY position")
            .map_err(db_error(&self.path, "read item scores"))?;
        let rows = stmt.query_map([id], |r| r.get::<_, String>(0)).map_err(db_error(&self.path, "read item scores"))?;
        crate::dump::DumpScores::from_lines(rows.enumerate().map(|(n, r)| {
            let at = format!("item score line {} of run {id} in {}", n + 1, self.path.display());
            let text = r.map_err(db_error(&self.path, "read item scores"))?;
            let value = serde_json::from_str(&text).map_err(|e| Error::bad_results(format!("parse {at}: {e}")))?;
            Ok((at, value))
        }))
    }

    /// How many rows each table holds: (runs, metrics, item scores).
    pub fn counts(&self) -> Result<(usize, usize, usize)> {
        let count = |table: &str| -> Result<usize> {
            self.conn
                .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
                .map_err(db_error(&self.path, "count rows"))
        };
        Ok((count("runs")?, count("metrics")?, count("item_scores")?))
    }

    fn parse(&self, id: i64, json: &str) -> Result<Run> {
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::bad_results(format!("parse run {id} in {}: {e}", self.path.display())))?;
        Run::from_json(&value).map_err(|e| {
            Error::caused_by(ErrorKind::Results, format!("read run {id} in {}: {e}", self.path.display()), e)
        })
    }
}
