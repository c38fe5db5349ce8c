//! TLS with CA and client certificates, and user/password authentication, on real servers.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::backend::{LeaderLock, LockError};
use leader_lock::conformance::{patience, wait_leader};
use leader_lock::Identity;
use leader_lock_etcd::{EtcdConfig, EtcdLock, DEFAULT_KEY_PREFIX};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use testkit::etcd::{EtcdOptions, EtcdServer, EtcdTls};

struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    other_ca: PathBuf,
}

fn write(dir: &Path, name: &str, pem: String) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, pem).expect("writes a PEM file");
    p
}

fn new_ca(cn: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed CA");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    cn: &str,
    sans: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let mut params = CertificateParams::new(sans).expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("signed leaf");
    (cert.pem(), key.serialize_pem())
}

fn pki(dir: &Path) -> Pki {
    let (ca_pem, issuer) = new_ca("gateway-leader test CA");
    let (server_pem, server_key) = leaf(
        &issuer,
        "etcd",
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_pem, client_key) = leaf(
        &issuer,
        "gateway-leader",
        vec![],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (other_ca, _) = new_ca("some other CA");
    Pki {
        ca: write(dir, "ca.pem", ca_pem),
        server_cert: write(dir, "server.pem", server_pem),
        server_key: write(dir, "server-key.pem", server_key),
        client_cert: write(dir, "client.pem", client_pem),
        client_key: write(dir, "client-key.pem", client_key),
        other_ca: write(dir, "other-ca.pem", other_ca),
    }
}

async fn acquires(lock: &EtcdLock) {
    let attempt = lock
        .try_acquire_or_renew(&common::candidate("tls"))
        .await
        .expect("acquire works");
    assert!(
        matches!(attempt, leader_lock::backend::Attempt::Leader { .. }),
        "{attempt:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates() {
    common::init_tracing();
    let certs = tempfile::tempdir().expect("temp dir");
    let pki = pki(certs.path());
    let server = EtcdServer::start_with(EtcdOptions {
        tls: Some(EtcdTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            client_ca_file: Some(pki.ca.clone()),
        }),
        ..EtcdOptions::default()
    })
    .await
    .expect("etcd with TLS starts");
    assert!(server.endpoint().starts_with("https://"));

    let mut good = EtcdConfig::new(vec![server.endpoint()]);
    good.request_timeout = Some(Duration::from_millis(1500));
    good.ca_file = Some(pki.ca.clone());
    good.cert_file = Some(pki.client_cert.clone());
    good.key_file = Some(pki.client_key.clone());
    good.validate(&common::timing()).expect("valid settings");
    let lock = EtcdLock::connect(good.clone(), "tls")
        .await
        .expect("TLS connect");
    acquires(&lock).await;

    // A full election over TLS, with the watch.
    let elector = leader_lock::Elector::spawn(
        std::sync::Arc::new(
            EtcdLock::connect(good.clone(), "tls-elector")
                .await
                .expect("connect"),
        ),
        leader_lock::ElectorConfig {
            identity: Identity::new("tls"),
            timing: common::timing(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    wait_leader(
        &elector.leadership(),
        patience(&common::timing()),
        "TLS elector",
    )
    .await;
    assert!(elector.shutdown().await.expect("release"));

    // No client certificate: the server refuses the handshake.
    let mut no_cert = good.clone();
    no_cert.cert_file = None;
    no_cert.key_file = None;
    let err = EtcdLock::connect(no_cert, "tls")
        .await
        .err()
        .expect("needs a client cert");
    eprintln!("without a client certificate: {err}");
    assert!(!matches!(err, LockError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains(&server.endpoint()), "{err}");
    assert!(err.to_string().contains("etcd-cert-file"), "{err}");

    // A CA that did not sign the server's certificate.
    let mut wrong_ca = good.clone();
    wrong_ca.ca_file = Some(pki.other_ca.clone());
    let err = EtcdLock::connect(wrong_ca, "tls")
        .await
        .err()
        .expect("untrusted server");
    eprintln!("with the wrong CA: {err}");
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("etcd-ca-file"), "{err}");

    // No CA file: the system's roots do not know the test CA, so the server is not trusted.
    let mut system_roots = good.clone();
    system_roots.ca_file = None;
    let err = EtcdLock::connect(system_roots, "tls")
        .await
        .err()
        .expect("a test CA is not a system root");
    eprintln!("with the system roots: {err}");
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("etcd-ca-file"), "{err}");

    // Garbage instead of a certificate.
    let junk = write(certs.path(), "junk.pem", "not a certificate".into());
    let mut bad = good.clone();
    bad.cert_file = Some(junk.clone());
    let err = EtcdLock::connect(bad, "tls")
        .await
        .err()
        .expect("bad cert file");
    eprintln!("with a garbage client certificate: {err}");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");
    assert_eq!(
        common::refused_setting(&err),
        Some("etcd-cert-file"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let mut admin = common::raw_client(&server).await;
    // etcd requires a root user before auth can be enabled.
    admin.role_add("root").await.ok();
    admin
        .user_add("root", "root-secret", None)
        .await
        .expect("root user");
    admin
        .user_grant_role("root", "root")
        .await
        .expect("root role");
    admin.role_add("gateway-leader").await.expect("role");
    admin
        .role_grant_permission(
            "gateway-leader",
            etcd_client::Permission::read_write(DEFAULT_KEY_PREFIX).with_prefix(),
        )
        .await
        .expect("permission on the prefix");
    admin.user_add("gw", "gw-secret", None).await.expect("user");
    admin
        .user_grant_role("gw", "gateway-leader")
        .await
        .expect("grant");
    admin.auth_enable().await.expect("auth enabled");

    let mut good = common::config(&server);
    good.username = Some("gw".into());
    good.password = Some("gw-secret".into());
    good.validate(&common::timing()).expect("valid settings");
    let lock = EtcdLock::connect(good.clone(), "auth")
        .await
        .expect("auth connect");
    acquires(&lock).await;
    let elector = leader_lock::Elector::spawn(
        std::sync::Arc::new(
            EtcdLock::connect(good.clone(), "auth-elector")
                .await
                .expect("connect"),
        ),
        leader_lock::ElectorConfig {
            identity: Identity::new("auth"),
            timing: common::timing(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    wait_leader(
        &elector.leadership(),
        patience(&common::timing()),
        "authenticated elector",
    )
    .await;
    assert!(elector.shutdown().await.expect("release"));

    let mut wrong = good.clone();
    wrong.password = Some("nope".into());
    let err = EtcdLock::connect(wrong, "auth")
        .await
        .err()
        .expect("wrong password");
    eprintln!("wrong password: {err}");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");
    assert!(err.to_string().contains("etcd-username"), "{err}");
    // The refusal keeps etcd's own error, for callers that inspect the cause.
    let source = std::error::Error::source(&err).expect("the etcd error is kept");
    assert!(
        matches!(
            source.downcast_ref::<etcd_client::Error>(),
            Some(etcd_client::Error::GRpcStatus(_))
        ),
        "{source:?}"
    );

    let mut anonymous = good.clone();
    anonymous.username = None;
    anonymous.password = None;
    let err = EtcdLock::connect(anonymous, "auth")
        .await
        .err()
        .expect("no credentials");
    eprintln!("no credentials: {err}");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");

    // A user whose role does not cover the key prefix.
    let mut other_prefix = good.clone();
    other_prefix.key_prefix = "/elsewhere/".into();
    let err = EtcdLock::connect(other_prefix, "auth")
        .await
        .err()
        .expect("no permission");
    eprintln!("outside the granted prefix: {err}");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");
}
