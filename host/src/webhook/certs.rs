//! Certificates for the host's webhooks without cert-manager: a CA and a serving certificate
//! the host makes itself, keeps in one Secret (so that every replica serves the same one),
//! renews well before they expire, and rotates the CA with an overlap. This module decides, as
//! plain data ([`plan`]), and makes what the decision asks for ([`perform`]); reading and
//! writing the Secret and reloading the server are the callers'.
//!
//! Why the CA rolls in steps: the API server checks the webhook's serving certificate against
//! the `caBundle` of the webhook configuration (or of a CRD's conversion stanza). If the CA and
//! the serving certificate change at once, every call fails between the moment a replica serves
//! the new certificate and the moment the API server holds the new bundle (kubebuilder#5253,
//! the webhook failure their users report most). So a CA is replaced in three writes, each at
//! least [`Timing::overlap`] after the one before:
//!
//! 1. [`Step::AddNextCa`]: a next CA is made and published beside the current one (the bundle
//!    holds both; the serving certificate is still the current CA's);
//! 2. [`Step::SwitchToNextCa`]: the serving certificate is reissued by the next CA, which becomes
//!    the current one; the old one stays in the bundle as the previous CA;
//! 3. [`Step::DropPreviousCa`]: the previous CA leaves the bundle.
//!
//! At no moment does a replica serve a certificate whose CA the bundle lacks, so long as the
//! bundle is written out before the next step (the caller's order). The serving certificate
//! alone is renewed by the current CA ([`Step::RenewLeaf`]): the bundle does not change.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Why certificates could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Generating or signing failed.
    #[error("making the {what}: {source}")]
    Make {
        /// Which certificate.
        what: &'static str,
        /// The cause.
        #[source]
        source: rcgen::Error,
    },
    /// A stored certificate or key does not parse.
    #[error("reading the stored {what}: {message}")]
    Read {
        /// Which certificate or key.
        what: &'static str,
        /// The cause.
        message: String,
    },
}

/// How long certificates live and how the steps are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Lifetime of a CA.
    pub ca_lifetime: Duration,
    /// Lifetime of a serving certificate.
    pub leaf_lifetime: Duration,
    /// How long each CA step waits for the one before to reach every API server and replica:
    /// the webhook configurations and CRDs are patched at once, the replicas reload the Secret
    /// within seconds, and the API server re-reads a bundle on its next call.
    pub overlap: Duration,
}

impl Default for Timing {
    /// A CA of a year, a serving certificate of 30 days, ten minutes between CA steps. A
    /// certificate is renewed with a third of its life left ([`renew_at`]): the serving
    /// certificate 10 days before it expires, the CA four months before.
    fn default() -> Self {
        Self {
            ca_lifetime: Duration::from_secs(365 * 24 * 3600),
            leaf_lifetime: Duration::from_secs(30 * 24 * 3600),
            overlap: Duration::from_secs(600),
        }
    }
}

impl Timing {
    /// Short lifetimes, for tests that force rotations: `lifetime` for the serving certificate,
    /// three times that for the CA, a tenth of it between CA steps.
    pub fn short(lifetime: Duration) -> Self {
        Self {
            ca_lifetime: lifetime * 3,
            leaf_lifetime: lifetime,
            overlap: lifetime / 10,
        }
    }
}

/// When a certificate valid from `not_before` to `not_after` (Unix seconds) is renewed: with a
/// third of its life left, as cert-manager's default `renewBefore` does.
pub fn renew_at(not_before: i64, not_after: i64) -> i64 {
    not_after - (not_after - not_before) / 3
}

/// A certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Pair {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Pair {
    /// The certificate, never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// Everything the host keeps: what the Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// The CA that issues the serving certificate.
    pub ca: Pair,
    /// The serving certificate, for every name the webhooks are called by.
    pub leaf: Pair,
    /// A CA published beside `ca`, to issue the next serving certificate (step 1 done).
    pub next_ca: Option<Pair>,
    /// The CA before `ca`, still in the bundle (step 2 done).
    pub previous_ca: Option<String>,
    /// When the last CA step was taken (Unix seconds): the next one waits
    /// [`Timing::overlap`] after it.
    pub stepped_at: Option<i64>,
}

impl Material {
    /// The `caBundle` the API server needs while this material is served: the current CA,
    /// and the next or the previous one when a rotation is under way.
    pub fn ca_bundle(&self) -> String {
        let mut bundle = self.ca.cert_pem.clone();
        for extra in [
            self.next_ca.as_ref().map(|p| &p.cert_pem),
            self.previous_ca.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            if !bundle.ends_with('\n') {
                bundle.push('\n');
            }
            bundle.push_str(extra);
        }
        bundle
    }
}

/// What [`plan`] reads of the material: validity and names, parsed from the certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The current CA's validity, Unix seconds.
    pub ca: (i64, i64),
    /// The serving certificate's validity, Unix seconds.
    pub leaf: (i64, i64),
    /// The DNS names the serving certificate is for.
    pub leaf_names: Vec<String>,
    /// Whether the serving certificate was issued by the current CA.
    pub leaf_from_ca: bool,
    /// Whether a next CA is published.
    pub next_ca: bool,
    /// Whether a previous CA is published.
    pub previous_ca: bool,
    /// When the last CA step was taken.
    pub stepped_at: Option<i64>,
}

/// What to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing usable is stored: make a CA and a serving certificate.
    Create,
    /// A new serving certificate from the current CA (near expiry, other names, or not the
    /// current CA's).
    RenewLeaf,
    /// CA step 1: a next CA, published beside the current one.
    AddNextCa,
    /// CA step 2: the serving certificate from the next CA, which becomes current.
    SwitchToNextCa,
    /// CA step 3: the previous CA leaves the bundle.
    DropPreviousCa,
    /// Nothing to do; look again in this many seconds.
    Keep {
        /// Seconds until the next step is due.
        recheck_in: i64,
    },
}

/// What to do at `now` (Unix seconds) with what is stored (`None`: nothing, or nothing that
/// parses), for a serving certificate that must hold `names`.
pub fn plan(now: i64, facts: Option<&Facts>, timing: &Timing, names: &[String]) -> Step {
    let Some(facts) = facts else {
        return Step::Create;
    };
    // A CA that has expired (the host was off for months) cannot be rolled: start over.
    if now >= facts.ca.1 {
        return Step::Create;
    }
    let leaf_due = renew_at(facts.leaf.0, facts.leaf.1);
    let wrong_leaf = !facts.leaf_from_ca || names.iter().any(|n| !facts.leaf_names.contains(n));
    // The serving certificate first: one about to expire breaks every call now, whatever the
    // CA steps wait for (renewing it from the current CA leaves the bundle as it is).
    if wrong_leaf || now >= leaf_due {
        return Step::RenewLeaf;
    }
    let step_due = facts
        .stepped_at
        .map_or(i64::MIN, |at| at.saturating_add(secs(timing.overlap)));
    if facts.next_ca || facts.previous_ca {
        if now < step_due {
            return Step::Keep {
                recheck_in: (step_due - now).min(leaf_due - now),
            };
        }
        return if facts.next_ca {
            Step::SwitchToNextCa
        } else {
            Step::DropPreviousCa
        };
    }
    let ca_due = renew_at(facts.ca.0, facts.ca.1);
    if now >= ca_due {
        return Step::AddNextCa;
    }
    Step::Keep {
        recheck_in: (leaf_due - now).min(ca_due - now).max(1),
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// What `step` makes of `material` at `now`, for `names`. [`Step::Keep`] changes nothing.
pub fn perform(
    step: Step,
    material: Option<&Material>,
    now: i64,
    timing: &Timing,
    names: &[String],
) -> Result<Option<Material>, CertError> {
    let create = || -> Result<Material, CertError> {
        let ca = make_ca(now, timing)?;
        let leaf = make_leaf(&ca, now, timing, names)?;
        Ok(Material {
            ca,
            leaf,
            next_ca: None,
            previous_ca: None,
            stepped_at: None,
        })
    };
    let Some(current) = material else {
        return match step {
            Step::Keep { .. } => Ok(None),
            _ => create().map(Some),
        };
    };
    let mut next = current.clone();
    match step {
        Step::Keep { .. } => return Ok(None),
        Step::Create => return create().map(Some),
        Step::RenewLeaf => next.leaf = make_leaf(&current.ca, now, timing, names)?,
        Step::AddNextCa => {
            next.next_ca = Some(make_ca(now, timing)?);
            next.stepped_at = Some(now);
        }
        Step::SwitchToNextCa => {
            let Some(ca) = current.next_ca.clone() else {
                return Ok(None);
            };
            next.leaf = make_leaf(&ca, now, timing, names)?;
            next.previous_ca = Some(current.ca.cert_pem.clone());
            next.ca = ca;
            next.next_ca = None;
            next.stepped_at = Some(now);
        }
        Step::DropPreviousCa => {
            next.previous_ca = None;
            next.stepped_at = Some(now);
        }
    }
    Ok(Some(next))
}

/// Clock skew the certificates allow for: valid from an hour before they are made (a tenth of
/// their lifetime, if that is less).
const SKEW: i64 = 3600;

fn validity(params: &mut CertificateParams, now: i64, lifetime: Duration) -> Result<(), CertError> {
    // A tenth of the lifetime at most: a skew longer than a short lifetime (the tests') would
    // put every certificate past its renewal time from the start (renewal counts from
    // `not_before`).
    let skew = SKEW.min(secs(lifetime) / 10);
    let at = |s: i64| {
        time::OffsetDateTime::from_unix_timestamp(s).map_err(|err| CertError::Read {
            what: "clock",
            message: err.to_string(),
        })
    };
    params.not_before = at(now - skew)?;
    params.not_after = at(now.saturating_add(secs(lifetime)))?;
    Ok(())
}

fn make_ca(now: i64, timing: &Timing) -> Result<Pair, CertError> {
    let make = |source| CertError::Make { what: "CA", source };
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(make)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params
        .distinguished_name
        .push(DnType::CommonName, format!("wasmop webhook CA {now}"));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    validity(&mut params, now, timing.ca_lifetime)?;
    let key = KeyPair::generate().map_err(make)?;
    let cert = params.self_signed(&key).map_err(make)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn make_leaf(ca: &Pair, now: i64, timing: &Timing, names: &[String]) -> Result<Pair, CertError> {
    let make = |source| CertError::Make {
        what: "serving certificate",
        source,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(|err| CertError::Read {
        what: "CA key",
        message: err.to_string(),
    })?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(|err| CertError::Read {
        what: "CA certificate",
        message: err.to_string(),
    })?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(make)?;
    if let Some(first) = names.first() {
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, now, timing.leaf_lifetime)?;
    let key = KeyPair::generate().map_err(make)?;
    let cert = params.signed_by(&key, &issuer).map_err(make)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// What [`plan`] needs to know of `material`, read from its certificates.
pub fn facts(material: &Material) -> Result<Facts, CertError> {
    let ca = parse(&material.ca.cert_pem, "CA certificate")?;
    let leaf = parse(&material.leaf.cert_pem, "serving certificate")?;
    Ok(Facts {
        ca: (ca.not_before, ca.not_after),
        leaf: (leaf.not_before, leaf.not_after),
        leaf_names: leaf.names,
        leaf_from_ca: leaf.issuer == ca.subject && leaf.authority_key == ca.subject_key,
        next_ca: material.next_ca.is_some(),
        previous_ca: material.previous_ca.is_some(),
        stepped_at: material.stepped_at,
    })
}

struct Parsed {
    not_before: i64,
    not_after: i64,
    names: Vec<String>,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    subject_key: Option<Vec<u8>>,
    authority_key: Option<Vec<u8>>,
}

fn parse(pem: &str, what: &'static str) -> Result<Parsed, CertError> {
    use x509_parser::{extensions::ParsedExtension, prelude::*};
    let read = |message: String| CertError::Read { what, message };
    let (_, pem) = parse_x509_pem(pem.as_bytes()).map_err(|err| read(err.to_string()))?;
    let cert = pem.parse_x509().map_err(|err| read(err.to_string()))?;
    let mut names = Vec::new();
    let mut subject_key = None;
    let mut authority_key = None;
    for extension in cert.extensions() {
        match extension.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                names.extend(san.general_names.iter().filter_map(|n| {
                    match n {
                        GeneralName::DNSName(name) => Some(name.to_string()),
                        // An address is written as rcgen reads one (`127.0.0.1`), for a host the
                        // API server calls by URL.
                        GeneralName::IPAddress(bytes) => match bytes.len() {
                            4 => <[u8; 4]>::try_from(*bytes)
                                .ok()
                                .map(|b| std::net::IpAddr::from(b).to_string()),
                            16 => <[u8; 16]>::try_from(*bytes)
                                .ok()
                                .map(|b| std::net::IpAddr::from(b).to_string()),
                            _ => None,
                        },
                        _ => None,
                    }
                }))
            }
            ParsedExtension::SubjectKeyIdentifier(id) => subject_key = Some(id.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(id) => {
                authority_key = id.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => {}
        }
    }
    Ok(Parsed {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        names,
        subject: cert.subject().as_raw().to_vec(),
        issuer: cert.issuer().as_raw().to_vec(),
        subject_key,
        authority_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3600;

    fn names() -> Vec<String> {
        vec!["wasmop.wasmop-system.svc".into()]
    }

    /// Plans and performs from `start` every `tick` seconds until `until`, returning the steps
    /// taken (Keep left out) and the material at the end, checking at every moment that the
    /// serving certificate's CA is in the bundle (the invariant the order exists for).
    fn run(timing: &Timing, start: i64, tick: i64, until: i64) -> (Vec<Step>, Material) {
        let mut material: Option<Material> = None;
        let mut steps = Vec::new();
        let mut now = start;
        while now < until {
            let known = material.as_ref().map(|m| facts(m).expect("parses"));
            let step = plan(now, known.as_ref(), timing, &names());
            if let Some(next) =
                perform(step, material.as_ref(), now, timing, &names()).expect("performs")
            {
                // A serving certificate from another CA only once that CA has been in the
                // published bundle for an overlap.
                if let Some(before) = &material
                    && next.ca != before.ca
                    && step != Step::Create
                {
                    assert!(before.ca_bundle().contains(&next.ca.cert_pem), "at {now}");
                    let since = before.stepped_at.expect("a step published the CA");
                    assert!(now - since >= secs(timing.overlap), "at {now}");
                }
                steps.push(step);
                material = Some(next);
            }
            let m = material.as_ref().expect("made");
            let f = facts(m).expect("parses");
            assert!(f.leaf_from_ca, "at {now}: the leaf is not the current CA's");
            assert!(
                m.ca_bundle().contains(&m.ca.cert_pem),
                "at {now}: the bundle lacks the serving certificate's CA"
            );
            assert!(now < f.leaf.1, "at {now}: the serving certificate expired");
            now += tick;
        }
        (steps, material.expect("made"))
    }

    #[test]
    fn nothing_stored_is_created_and_then_kept() {
        let timing = Timing::default();
        let now = 1_800_000_000;
        assert_eq!(plan(now, None, &timing, &names()), Step::Create);
        let made = perform(Step::Create, None, now, &timing, &names())
            .expect("made")
            .expect("material");
        let f = facts(&made).expect("parses");
        assert_eq!(f.leaf_names, names());
        assert!(f.leaf_from_ca);
        assert_eq!(f.leaf.1 - now, 30 * 24 * HOUR);
        match plan(now + HOUR, Some(&f), &timing, &names()) {
            Step::Keep { recheck_in } => {
                assert_eq!(recheck_in, renew_at(f.leaf.0, f.leaf.1) - (now + HOUR))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(made.ca_bundle(), made.ca.cert_pem);
    }

    /// Over three CA lifetimes, ticking every tenth of an overlap: the serving certificate is
    /// renewed before it expires, each CA rolls in its three steps in order, each step at least
    /// an overlap after the one before, and the serving certificate's CA is in the bundle
    /// throughout.
    #[test]
    fn rotations_keep_the_serving_certificates_ca_in_the_bundle() {
        let timing = Timing::short(Duration::from_secs(300 * 60));
        let overlap = secs(timing.overlap);
        let start = 1_800_000_000;
        let (steps, _) = run(
            &timing,
            start,
            overlap / 10,
            start + 3 * secs(timing.ca_lifetime),
        );
        assert_eq!(steps[0], Step::Create);
        let rolls: Vec<&Step> = steps
            .iter()
            .filter(|s| !matches!(s, Step::RenewLeaf | Step::Create))
            .collect();
        assert!(rolls.len() >= 6, "{steps:?}");
        for window in rolls.chunks(3).filter(|w| w.len() == 3) {
            assert_eq!(
                window,
                [
                    &Step::AddNextCa,
                    &Step::SwitchToNextCa,
                    &Step::DropPreviousCa
                ],
                "{steps:?}"
            );
        }
        assert!(steps.iter().filter(|s| **s == Step::RenewLeaf).count() >= 3);
    }

    #[test]
    fn a_ca_step_waits_an_overlap_after_the_one_before() {
        let timing = Timing::default();
        let now = 1_800_000_000;
        let made = perform(Step::Create, None, now, &timing, &names())
            .expect("made")
            .expect("material");
        let added = perform(Step::AddNextCa, Some(&made), now, &timing, &names())
            .expect("made")
            .expect("material");
        assert_eq!(added.ca_bundle().matches("BEGIN CERTIFICATE").count(), 2);
        let f = facts(&added).expect("parses");
        assert!(matches!(
            plan(now + 599, Some(&f), &timing, &names()),
            Step::Keep { recheck_in: 1 }
        ));
        assert_eq!(
            plan(now + 600, Some(&f), &timing, &names()),
            Step::SwitchToNextCa
        );
        let switched = perform(
            Step::SwitchToNextCa,
            Some(&added),
            now + 600,
            &timing,
            &names(),
        )
        .expect("made")
        .expect("material");
        let f = facts(&switched).expect("parses");
        assert!(f.leaf_from_ca, "the leaf is the new CA's");
        assert_eq!(switched.previous_ca.as_ref(), Some(&made.ca.cert_pem));
        assert_eq!(switched.ca_bundle().matches("BEGIN CERTIFICATE").count(), 2);
        assert!(matches!(
            plan(now + 1199, Some(&f), &timing, &names()),
            Step::Keep { .. }
        ));
        assert_eq!(
            plan(now + 1200, Some(&f), &timing, &names()),
            Step::DropPreviousCa
        );
    }

    /// A serving certificate for other names (the Service renamed) or from another CA is
    /// reissued at once; an expired CA starts over.
    #[test]
    fn a_wrong_or_stale_certificate_is_replaced() {
        let timing = Timing::default();
        let now = 1_800_000_000;
        let made = perform(Step::Create, None, now, &timing, &names())
            .expect("made")
            .expect("material");
        let f = facts(&made).expect("parses");
        let other = vec!["wasmop.elsewhere.svc".to_string()];
        assert_eq!(plan(now, Some(&f), &timing, &other), Step::RenewLeaf);
        let foreign = perform(Step::Create, None, now, &timing, &names())
            .expect("made")
            .expect("material");
        let mixed = Material {
            leaf: foreign.leaf,
            ..made.clone()
        };
        let f = facts(&mixed).expect("parses");
        assert!(!f.leaf_from_ca);
        assert_eq!(plan(now, Some(&f), &timing, &names()), Step::RenewLeaf);
        let f = facts(&made).expect("parses");
        assert_eq!(
            plan(now + secs(timing.ca_lifetime), Some(&f), &timing, &names()),
            Step::Create
        );
    }

    #[test]
    fn a_key_is_never_printed() {
        let made = perform(
            Step::Create,
            None,
            1_800_000_000,
            &Timing::default(),
            &names(),
        )
        .expect("made")
        .expect("material");
        assert!(!format!("{made:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn a_short_lived_set_is_kept_until_its_renewal_time() {
        let timing = Timing::short(Duration::from_secs(20));
        let now = 1_800_000_000;
        let made = perform(Step::Create, None, now, &timing, &names())
            .expect("made")
            .expect("some");
        let f = facts(&made).expect("facts");
        assert!(
            matches!(
                plan(now + 1, Some(&f), &timing, &names()),
                Step::Keep { .. }
            ),
            "renewed at once"
        );
        assert_eq!(plan(now + 15, Some(&f), &timing, &names()), Step::RenewLeaf);
    }
}
