//! Server-side fencing (docs/kubernetes.md, "Server-side fencing"): the policy the apiserver
//! enforces, rendered for any controller's Lease ([`policy`], `gateway-leader fencing-policy`),
//! and the startup check that says whether this replica's Lease is fenced ([`check`]).

pub mod check;
pub mod policy;

pub use policy::{main, render, FencingPolicyArgs};
