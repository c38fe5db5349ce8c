//! The certificates, keys and token file of a test apiserver.

use super::*;

/// Certificates, keys and the token file of a test apiserver, written into its dir.
pub(super) struct Pki {
    pub(super) ca_file: PathBuf,
    pub(super) cert_file: PathBuf,
    pub(super) key_file: PathBuf,
    pub(super) sa_pub: PathBuf,
    pub(super) sa_key: PathBuf,
    pub(super) tokens: PathBuf,
    pub(super) admin_token: String,
}

impl Pki {
    pub(super) fn write(dir: &Path) -> Result<Pki> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "gateway-leader test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        // rustls refuses a CA certificate as the server's own: the serving cert is a plain leaf.
        let leaf_key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        leaf.subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        leaf.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        leaf.is_ca = IsCa::ExplicitNoCa;
        leaf.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
        // ECDSA P-256 works for service-account keys (ES256 tokens).
        let sa = KeyPair::generate()?;
        let admin_token = format!("admin-{}", random_hex());
        let p = |n: &str| dir.join(n);
        let pki = Pki {
            ca_file: p("ca.crt"),
            cert_file: p("apiserver.crt"),
            key_file: p("apiserver.key"),
            sa_pub: p("sa.pub"),
            sa_key: p("sa.key"),
            tokens: p("tokens.csv"),
            admin_token,
        };
        std::fs::write(&pki.ca_file, ca_cert.pem())?;
        std::fs::write(&pki.cert_file, leaf_cert.pem())?;
        std::fs::write(&pki.key_file, leaf_key.serialize_pem())?;
        std::fs::write(&pki.sa_pub, sa.public_key_pem())?;
        std::fs::write(&pki.sa_key, sa.serialize_pem())?;
        std::fs::write(
            &pki.tokens,
            format!("{},admin,admin-uid,\"system:masters\"\n", pki.admin_token),
        )?;
        Ok(pki)
    }
}

fn random_hex() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:016x}", h.finish())
}
