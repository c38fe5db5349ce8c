//! Secrets: kept out of Debug output and `--print-config`.

use std::fmt;
use std::path::Path;

use leader_lock::input::read_bounded;

/// A secret that never shows in Debug output or `--print-config`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The check of a secret given as text (from the environment or the config file).
    pub(super) fn from_text(v: &str) -> Result<Self, String> {
        Ok(Secret(v.to_string()))
    }

    /// The check of a secret's file setting: the file's text without its line ending, read
    /// bounded like every file setting, and neither empty nor anything but UTF-8.
    pub(super) fn from_file(path: &str) -> Result<Self, String> {
        let path = Path::new(path);
        let bytes = read_bounded(path)?;
        let s = String::from_utf8(bytes)
            .map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
        let s = s.trim_end_matches(['\r', '\n']);
        if s.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        Ok(Secret(s.to_string()))
    }

    /// The secret's value, for handing to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
