//! The program's own names and codes, which every subcommand and part shares.

/// The program's name where Kubernetes shows who wrote: the Lease's field manager, the source
/// component of the leader-election Events, the prefix of the status writes' field manager.
pub const PROGRAM: &str = "gateway-leader";

/// Exit code for bad input (flags, environment, config file), as clap uses: nothing was touched.
/// A clean stop exits 0, a failure at run time 1.
pub const EXIT_USAGE: u8 = 2;

/// The hostname: this replica's name when neither the setting nor `POD_NAME` gives one.
pub fn hostname() -> String {
    gethostname::gethostname()
        .to_string_lossy()
        .trim()
        .to_string()
}

/// The `User-Agent` of every request this replica sends to Kubernetes: the program, its
/// version and the replica, so the apiserver's audit log names who sent it.
pub fn user_agent(identity: &leader_lock::Identity) -> String {
    format!("{PROGRAM}/{} ({identity})", env!("CARGO_PKG_VERSION"))
}
