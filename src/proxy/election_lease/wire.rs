//! The controller's Lease on the wire, in the three encodings client-go may send and accept:
//! JSON, Kubernetes' protobuf (the `k8s\0` envelope around `runtime.Unknown`) and CBOR (with
//! the self-describing tag the apiserver writes first).

use bytes::Bytes;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// The media types.
pub(super) const JSON: &str = "application/json";
pub(super) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub(super) const CBOR: &str = "application/cbor";

/// The prefix of every protobuf object the apiserver writes.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";
/// CBOR's self-describing tag (55799), which the apiserver writes before every object.
const CBOR_SELF_DESCRIBED: &[u8] = &[0xd9, 0xd9, 0xf7];

/// An encoding of a Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    Json,
    Protobuf,
    Cbor,
}

impl Encoding {
    /// The encoding of a request's body, from its `Content-Type`; `None` for any other type
    /// (a patch's, YAML), which the Lease is never sent in.
    pub(super) fn of_body(content_type: Option<&str>) -> Option<Encoding> {
        let essence = content_type
            .unwrap_or(JSON)
            .split(';')
            .next()
            .unwrap_or("")
            .trim();
        match essence.to_ascii_lowercase().as_str() {
            "" | JSON => Some(Encoding::Json),
            PROTOBUF => Some(Encoding::Protobuf),
            CBOR => Some(Encoding::Cbor),
            _ => None,
        }
    }

    /// The encoding of the answer: the caller's most preferred of the three (`Accept`, by
    /// weight, then order), JSON when it names none of them or anything goes.
    pub(super) fn for_answer(accept: Option<&str>) -> Encoding {
        let Some(accept) = accept else {
            return Encoding::Json;
        };
        let mut best: Option<(u16, Encoding)> = None;
        for item in accept.split(',') {
            let mut params = item.split(';');
            let essence = params.next().unwrap_or("").trim().to_ascii_lowercase();
            let weight = params
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .map(|q| (q.clamp(0.0, 1.0) * 1000.0) as u16)
                .next()
                .unwrap_or(1000);
            let encoding = match essence.as_str() {
                JSON | "application/*" | "*/*" => Encoding::Json,
                PROTOBUF => Encoding::Protobuf,
                CBOR => Encoding::Cbor,
                _ => continue,
            };
            if weight > 0 && best.is_none_or(|(w, _)| weight > w) {
                best = Some((weight, encoding));
            }
        }
        best.map_or(Encoding::Json, |(_, e)| e)
    }

    pub(super) fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => JSON,
            Encoding::Protobuf => PROTOBUF,
            Encoding::Cbor => CBOR,
        }
    }
}

/// Decodes a Lease sent in `encoding`; the message says what is wrong for a 400.
pub(super) fn decode(encoding: Encoding, body: &[u8]) -> Result<Lease, String> {
    match encoding {
        Encoding::Json => serde_json::from_slice(body).map_err(|e| format!("not a Lease: {e}")),
        Encoding::Cbor => {
            let body = body.strip_prefix(CBOR_SELF_DESCRIBED).unwrap_or(body);
            let value: ciborium::Value =
                ciborium::from_reader(body).map_err(|e| format!("not CBOR: {e}"))?;
            text_strings(value)
                .deserialized()
                .map_err(|e| format!("not a Lease in CBOR: {e}"))
        }
        Encoding::Protobuf => {
            let body = body
                .strip_prefix(PROTOBUF_MAGIC)
                .ok_or("not a Kubernetes protobuf object (no k8s\\0 prefix)")?;
            let unknown = <pb::Unknown as prost::Message>::decode(body)
                .map_err(|e| format!("not a Kubernetes protobuf object: {e}"))?;
            let kind = unknown.type_meta.as_ref().and_then(|t| t.kind.as_deref());
            if kind.is_some_and(|k| k != "Lease") {
                return Err(format!(
                    "a {} where a Lease was expected",
                    kind.unwrap_or("")
                ));
            }
            let lease = <pb::Lease as prost::Message>::decode(unknown.raw.unwrap_or_default())
                .map_err(|e| format!("not a Lease in protobuf: {e}"))?;
            Ok(lease.into())
        }
    }
}

/// `value` with its byte strings read as text: Kubernetes writes every Go string, map keys
/// included, as a CBOR byte string (its strings need not be UTF-8), where serde expects text.
fn text_strings(value: ciborium::Value) -> ciborium::Value {
    use ciborium::Value;
    match value {
        Value::Bytes(b) => match String::from_utf8(b) {
            Ok(s) => Value::Text(s),
            Err(e) => Value::Bytes(e.into_bytes()),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(text_strings).collect()),
        Value::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (text_strings(k), text_strings(v)))
                .collect(),
        ),
        Value::Tag(_, inner) => text_strings(*inner),
        other => other,
    }
}

/// Encodes `lease` (whose `apiVersion` and `kind` the JSON and CBOR forms carry) in `encoding`.
pub(super) fn encode(encoding: Encoding, lease: &Lease) -> Bytes {
    match encoding {
        Encoding::Json => Bytes::from(serde_json::to_vec(lease).unwrap_or_default()),
        Encoding::Cbor => {
            let mut out = CBOR_SELF_DESCRIBED.to_vec();
            // Writing to a Vec fails only on a serializer error, which a Lease has none of.
            if ciborium::into_writer(lease, &mut out).is_err() {
                out.truncate(CBOR_SELF_DESCRIBED.len());
            }
            Bytes::from(out)
        }
        Encoding::Protobuf => {
            let raw = prost::Message::encode_to_vec(&pb::Lease::from(lease));
            let unknown = pb::Unknown {
                type_meta: Some(pb::TypeMeta {
                    api_version: Some("coordination.k8s.io/v1".into()),
                    kind: Some("Lease".into()),
                }),
                raw: Some(raw.into()),
                content_encoding: Some(String::new()),
                content_type: Some(String::new()),
            };
            let mut out = PROTOBUF_MAGIC.to_vec();
            out.extend(prost::Message::encode_to_vec(&unknown));
            Bytes::from(out)
        }
    }
}

/// Kubernetes' protobuf messages for a Lease, with the field numbers of `generated.proto`
/// (k8s.io/api/coordination/v1, k8s.io/apimachinery's meta/v1 and runtime); the fields of
/// `ObjectMeta` a Lease of an election never carries are left out (protobuf skips them).
mod pb {
    use bytes::Bytes;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(message, optional, tag = "1")]
        pub type_meta: Option<TypeMeta>,
        #[prost(bytes = "bytes", optional, tag = "2")]
        pub raw: Option<Bytes>,
        #[prost(string, optional, tag = "3")]
        pub content_encoding: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub content_type: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeMeta {
        #[prost(string, optional, tag = "1")]
        pub api_version: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub kind: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Lease {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<LeaseSpec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ObjectMeta {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub namespace: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub uid: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub resource_version: Option<String>,
        #[prost(message, optional, tag = "8")]
        pub creation_timestamp: Option<Time>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseSpec {
        #[prost(string, optional, tag = "1")]
        pub holder_identity: Option<String>,
        #[prost(int32, optional, tag = "2")]
        pub lease_duration_seconds: Option<i32>,
        #[prost(message, optional, tag = "3")]
        pub acquire_time: Option<Time>,
        #[prost(message, optional, tag = "4")]
        pub renew_time: Option<Time>,
        #[prost(int32, optional, tag = "5")]
        pub lease_transitions: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub strategy: Option<String>,
        #[prost(string, optional, tag = "7")]
        pub preferred_holder: Option<String>,
    }

    /// `Time` and `MicroTime` share this shape.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Time {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
        #[prost(int32, optional, tag = "2")]
        pub nanos: Option<i32>,
    }
}

fn timestamp(t: pb::Time) -> Option<Timestamp> {
    Timestamp::new(t.seconds.unwrap_or(0), t.nanos.unwrap_or(0)).ok()
}

fn pb_time(t: Timestamp) -> pb::Time {
    pb::Time {
        seconds: Some(t.as_second()),
        nanos: Some(t.subsec_nanosecond()),
    }
}

impl From<pb::Lease> for Lease {
    fn from(l: pb::Lease) -> Lease {
        let m = l.metadata.unwrap_or_default();
        let s = l.spec.unwrap_or_default();
        Lease {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                creation_timestamp: m.creation_timestamp.and_then(timestamp).map(Time),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: s.holder_identity,
                lease_duration_seconds: s.lease_duration_seconds,
                acquire_time: s.acquire_time.and_then(timestamp).map(MicroTime),
                renew_time: s.renew_time.and_then(timestamp).map(MicroTime),
                lease_transitions: s.lease_transitions,
                strategy: s.strategy,
                preferred_holder: s.preferred_holder,
            }),
        }
    }
}

impl From<&Lease> for pb::Lease {
    fn from(l: &Lease) -> pb::Lease {
        let m = &l.metadata;
        let s = l.spec.clone().unwrap_or_default();
        pb::Lease {
            metadata: Some(pb::ObjectMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                creation_timestamp: m.creation_timestamp.as_ref().map(|t| pb_time(t.0)),
            }),
            spec: Some(pb::LeaseSpec {
                holder_identity: s.holder_identity,
                lease_duration_seconds: s.lease_duration_seconds,
                acquire_time: s.acquire_time.map(|t| pb_time(t.0)),
                renew_time: s.renew_time.map(|t| pb_time(t.0)),
                lease_transitions: s.lease_transitions,
                strategy: s.strategy,
                preferred_holder: s.preferred_holder,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("contour".into()),
                namespace: Some("projectcontour".into()),
                resource_version: Some("17".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("contour-a_1f".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(
                    Timestamp::new(1_780_000_000, 123_456_000).expect("a time"),
                )),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn each_encoding_reads_what_it_writes() {
        for e in [Encoding::Json, Encoding::Protobuf, Encoding::Cbor] {
            let bytes = encode(e, &lease());
            assert_eq!(decode(e, &bytes).expect("decodes"), lease(), "{e:?}");
        }
    }

    #[test]
    fn protobuf_and_cbor_carry_the_apiserver_s_prefixes() {
        assert!(encode(Encoding::Protobuf, &lease()).starts_with(b"k8s\0"));
        assert!(encode(Encoding::Cbor, &lease()).starts_with(&[0xd9, 0xd9, 0xf7]));
        // client-go's JSON carries apiVersion and kind.
        let json: serde_json::Value =
            serde_json::from_slice(&encode(Encoding::Json, &lease())).expect("JSON");
        assert_eq!(json["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(json["kind"], "Lease");
        assert_eq!(json["spec"]["renewTime"], "2026-05-28T20:26:40.123456Z");
    }

    #[test]
    fn the_answer_follows_the_caller_s_preference() {
        use Encoding::*;
        for (accept, want) in [
            (None, Json),
            (Some("application/json, */*"), Json),
            (Some("application/vnd.kubernetes.protobuf, */*"), Protobuf),
            (Some("application/cbor;q=1, application/json;q=0.9"), Cbor),
            (Some("application/json;q=0.5, application/cbor"), Cbor),
            (Some("application/cbor;q=0, application/json"), Json),
            (Some("text/html"), Json),
        ] {
            assert_eq!(Encoding::for_answer(accept), want, "{accept:?}");
        }
        assert_eq!(Encoding::of_body(None), Some(Json));
        assert_eq!(
            Encoding::of_body(Some("application/vnd.kubernetes.protobuf")),
            Some(Protobuf)
        );
        assert_eq!(
            Encoding::of_body(Some("application/merge-patch+json")),
            None
        );
    }

    #[test]
    fn cbor_as_kubernetes_writes_it_with_byte_strings_is_read() {
        use ciborium::Value;
        let b = |s: &str| Value::Bytes(s.as_bytes().to_vec());
        let lease = Value::Map(vec![
            (b("apiVersion"), b("coordination.k8s.io/v1")),
            (b("kind"), b("Lease")),
            (
                b("metadata"),
                Value::Map(vec![
                    (b("name"), b("contour")),
                    (b("resourceVersion"), b("17")),
                ]),
            ),
            (
                b("spec"),
                Value::Map(vec![
                    (b("holderIdentity"), b("contour-a_1f")),
                    (b("leaseDurationSeconds"), Value::Integer(15.into())),
                    (b("renewTime"), b("2026-05-28T20:26:40.123456Z")),
                ]),
            ),
        ]);
        let mut body = CBOR_SELF_DESCRIBED.to_vec();
        ciborium::into_writer(&lease, &mut body).expect("CBOR");
        let read = decode(Encoding::Cbor, &body).expect("a Lease");
        assert_eq!(read.metadata.name.as_deref(), Some("contour"));
        let spec = read.spec.expect("a spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("contour-a_1f"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert!(spec.renew_time.is_some());
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        for e in [Encoding::Json, Encoding::Protobuf, Encoding::Cbor] {
            for body in [
                &b""[..],
                b"k8s\0\xff\xff",
                b"\xd9\xd9\xf7\xff",
                b"{\"spec\":7}",
            ] {
                assert!(decode(e, body).is_err(), "{e:?} {body:?}");
            }
        }
    }
}
