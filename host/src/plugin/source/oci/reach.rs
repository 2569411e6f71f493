//! Reach: which addresses the registry client may connect to.
//!
//! Whoever creates an App names the registry, so a registry address is a place the App's author
//! makes the host connect to, from the host's network position and past the tenant's
//! NetworkPolicies. Addresses fall in three classes ([`classify`]):
//! - **blocked** (link-local, cloud metadata services, addresses no registry has): never
//!   contacted, whatever is allowed, so nothing can make the host ask its node's metadata
//!   service for credentials;
//! - **private** (RFC 1918, loopback, CGNAT, ULA and other internal ranges): contacted only where
//!   the host is told to ([`PrivateNetworks`], `--allow-private-registries`) or where the
//!   governing `PluginPolicy`'s `registries` name the registry's exact `host:port` (a cluster
//!   admin vouching for it);
//! - **public**: the rest.
//!
//! The rule is applied where an address is about to be dialled: to address literals in every
//! URL (registry, token realm, each redirect) and to what DNS answers for names (the puller's
//! resolver), so a name pointing at `10.0.0.5` is refused as `10.0.0.5` is. IPv4 addresses
//! embedded in IPv6 ones (mapped, compatible, NAT64, 6to4) are classified as the IPv4 address
//! they reach.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

use ipnet::IpNet;
use reqwest::Url;

/// What an address is to the registry client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Reachable from anywhere: contacted.
    Public,
    /// Inside some network (RFC 1918, loopback, CGNAT, ULA ...): contacted only where allowed.
    Private,
    /// Link-local, metadata services and addresses no registry has: never contacted.
    Blocked,
}

/// The class of `ip`; an IPv6 address that carries an IPv4 one is classified as that.
pub fn classify(ip: IpAddr) -> Class {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

/// IPv4 ranges no registry should be reached at through an App, whatever is allowed: the
/// addresses of the platform's own services.
const BLOCKED_V4: &[(Ipv4Addr, u8, &str)] = &[
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        "link-local: AWS, GCP, Azure, OpenStack metadata",
    ),
    (
        Ipv4Addr::new(100, 100, 100, 200),
        32,
        "Alibaba Cloud metadata",
    ),
    // Azure's WireServer hands the VM agent its configuration and certificates.
    (Ipv4Addr::new(168, 63, 129, 16), 32, "Azure WireServer"),
    // Connecting to 0.0.0.0 reaches the host itself on Linux.
    (Ipv4Addr::new(0, 0, 0, 0), 8, "this network"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (Ipv4Addr::new(255, 255, 255, 255), 32, "broadcast"),
];

/// IPv4 ranges inside some network: reached only where allowed.
const PRIVATE_V4: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(10, 0, 0, 0), 8, "RFC 1918"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "RFC 1918"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "RFC 1918"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "CGNAT (RFC 6598)"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignments"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking (RFC 2544)"),
    // Reserved; GKE and others number Pods from it.
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved (class E)"),
];

fn in_v4(ip: Ipv4Addr, ranges: &[(Ipv4Addr, u8, &str)]) -> bool {
    let ip = u32::from(ip);
    ranges.iter().any(|&(base, prefix, _)| {
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        ip & mask == u32::from(base) & mask
    })
}

fn classify_v4(ip: Ipv4Addr) -> Class {
    if in_v4(ip, BLOCKED_V4) {
        Class::Blocked
    } else if in_v4(ip, PRIVATE_V4) {
        Class::Private
    } else {
        Class::Public
    }
}

/// AWS's IPv6 metadata service (inside fc00::/7, blocked before it is private).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

fn classify_v6(ip: Ipv6Addr) -> Class {
    let first = ip.segments()[0];
    if ip.is_unspecified()
        || ip.is_multicast()
        // fe80::/10 link-local
        || first & 0xffc0 == 0xfe80
        || ip == AWS_METADATA_V6
    {
        Class::Blocked
    } else if ip.is_loopback()
        // fc00::/7 unique local
        || first & 0xfe00 == 0xfc00
        // fec0::/10 site-local (deprecated, still routed by some)
        || first & 0xffc0 == 0xfec0
        // 64:ff9b:1::/48, NAT64 for local use (RFC 8215): which IPv4 address it reaches is
        // the network's own choice
        || ip.segments()[..3] == [0x64, 0xff9b, 1]
    {
        Class::Private
    } else {
        Class::Public
    }
}

/// The IPv4 address an IPv6 one reaches: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`, deprecated), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let low = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        // `::` and `::1` are IPv6's own unspecified and loopback addresses.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// The private networks registries may be reached in (`--allow-private-registries`); blocked
/// addresses stay refused whatever they cover.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrivateNetworks(Vec<IpNet>);

/// An entry of `--allow-private-registries` that is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not a CIDR like 10.0.0.0/8, 127.0.0.1/32 or fd00::/8")]
pub struct CidrError {
    /// The entry as given.
    pub entry: String,
}

/// Parses one CIDR (`10.0.0.0/8`, `fd00::/8`) or address (`10.0.0.5`, as `/32`); host bits
/// past the prefix are ignored (`10.1.2.3/8` is `10.0.0.0/8`).
pub fn parse_cidr(text: &str) -> Result<IpNet, CidrError> {
    let entry = text.trim();
    let refused = || CidrError {
        entry: text.to_string(),
    };
    if entry.contains('/') {
        entry
            .parse::<IpNet>()
            .map(|net| net.trunc())
            .map_err(|_| refused())
    } else {
        entry
            .parse::<IpAddr>()
            .map(IpNet::from)
            .map_err(|_| refused())
    }
}

impl PrivateNetworks {
    /// Every private address (never a blocked one): what a person's `wasmop plugin` command
    /// uses, run from their own network position.
    pub fn any() -> Self {
        Self(vec![
            IpNet::new_assert(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            IpNet::new_assert(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        ])
    }

    /// Parses a comma-separated list of CIDRs (`10.0.0.0/8,127.0.0.1`); empty entries are
    /// skipped, a bad one is named in the error.
    pub fn parse(list: &str) -> Result<Self, CidrError> {
        list.split(',')
            .filter(|entry| !entry.trim().is_empty())
            .map(parse_cidr)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Every network of `lists` (the flag given several times).
    pub fn union(lists: impl IntoIterator<Item = PrivateNetworks>) -> Self {
        Self(lists.into_iter().flat_map(|list| list.0).collect())
    }

    /// Whether `ip` (or the IPv4 address it embeds) is in one of the networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.0
            .iter()
            .any(|net| net.contains(&ip) || embedded.is_some_and(|v4| net.contains(&v4)))
    }
}

impl fmt::Display for PrivateNetworks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let list: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&list.join(","))
    }
}

/// Why an address is not contacted: the host's own words, shown in the App's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// An address literal that is link-local or a metadata service's.
    #[error("refused: {host} is a link-local or metadata address, which the host never contacts")]
    Blocked {
        /// The address.
        host: String,
    },
    /// A name whose every address is link-local or a metadata service's.
    #[error(
        "refused: {host} resolves only to link-local or metadata addresses, which the host \
         never contacts"
    )]
    BlockedName {
        /// The name.
        host: String,
    },
    /// A private address literal nothing allows.
    #[error(
        "refused: {host} is a private address; allow it with --allow-private-registries or a \
         PluginPolicy's registries"
    )]
    Private {
        /// The address.
        host: String,
    },
    /// A name whose addresses are private (or blocked), none of them allowed.
    #[error(
        "refused: {host} resolves to a private address; allow it with \
         --allow-private-registries or a PluginPolicy's registries"
    )]
    PrivateName {
        /// The name.
        host: String,
    },
    /// A name a policy's registries vouch for, on another port than theirs.
    #[error(
        "refused: {authority}: a PluginPolicy's registries let {host} be private only on the \
         port they name"
    )]
    OtherPort {
        /// `host:port` as the URL names it.
        authority: String,
        /// The name.
        host: String,
    },
}

/// A `host[:port]` a policy's registries name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    /// Lower case, IPv6 without brackets.
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// `host`, `host:port`, `[v6]` or `[v6]:port`; `None` for anything else.
    fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':')?)),
            }
        } else {
            match text.split_once(':') {
                // More than one colon: a bare IPv6 address.
                Some((_, rest)) if rest.contains(':') => (text, None),
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        if host.is_empty() {
            return None;
        }
        let port = match port {
            Some(port) => Some(port.parse().ok()?),
            None => None,
        };
        Some(Self {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// A URL's host, lower case, IPv6 without brackets.
fn url_host(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
    )
}

/// Which addresses one request may reach: the host's [`PrivateNetworks`], and the registries
/// (`host[:port]`) the governing policy vouches for.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    networks: PrivateNetworks,
    vouched: Vec<Authority>,
}

impl Reach {
    /// Private addresses in `networks`, and any private address for the `vouched` registries
    /// (entries that are not `host[:port]` vouch for nothing).
    pub fn new(networks: PrivateNetworks, vouched: &[String]) -> Self {
        Self {
            networks,
            vouched: vouched.iter().filter_map(|a| Authority::parse(a)).collect(),
        }
    }

    /// Whether a policy vouches for exactly `url`'s host and port (an entry without a port
    /// vouches for the scheme's default one).
    fn vouches(&self, url: &Url) -> bool {
        let Some(host) = url_host(url) else {
            return false;
        };
        self.vouched.iter().any(|a| {
            a.host == host
                && match a.port {
                    Some(port) => url.port_or_known_default() == Some(port),
                    None => url.port().is_none(),
                }
        })
    }

    /// Whether a policy vouches for `name` on some port.
    fn vouches_name(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        self.vouched.iter().any(|a| a.host == name)
    }

    /// Whether `ip` may be dialled, `vouched` or not by a policy; its class if not.
    fn admits(&self, ip: IpAddr, vouched: bool) -> Result<(), Class> {
        match classify(ip) {
            Class::Public => Ok(()),
            Class::Private if vouched || self.networks.contains(ip) => Ok(()),
            class => Err(class),
        }
    }

    /// Refuses a URL whose host is an address literal this request may not reach, or a name a
    /// policy vouches for on another port; names are checked again when resolved.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let Some(host) = url_host(url) else {
            return Ok(());
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            return match self.admits(ip, self.vouches(url)) {
                Ok(()) => Ok(()),
                Err(Class::Blocked) => Err(Refused::Blocked {
                    host: ip.to_string(),
                }),
                Err(_) => Err(Refused::Private {
                    host: ip.to_string(),
                }),
            };
        }
        // The resolver sees names without ports: a vouched name resolves to private addresses
        // for every port, so only the vouched port may be asked for.
        if self.vouches_name(&host) && !self.vouches(url) {
            let authority = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            };
            return Err(Refused::OtherPort { authority, host });
        }
        Ok(())
    }

    /// What DNS answered for `name`, less what may not be reached; an error if nothing is left.
    pub fn filter(
        &self,
        name: &str,
        found: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Refused> {
        let vouched = self.vouches_name(name);
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for address in found {
            match self.admits(address.ip(), vouched) {
                Ok(()) => kept.push(address),
                Err(class) => dropped.push((address.ip(), class)),
            }
        }
        if !dropped.is_empty() {
            // The addresses stay out of status (they are the cluster's DNS, not the App's).
            tracing::debug!(%name, ?dropped, kept = kept.len(), "registry addresses refused");
        }
        if kept.is_empty() && !dropped.is_empty() {
            let host = name.to_string();
            return Err(if dropped.iter().any(|(_, c)| *c == Class::Private) {
                Refused::PrivateName { host }
            } else {
                Refused::BlockedName { host }
            });
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use Class::{Blocked, Private, Public};

    /// Each range's first and last address and the neighbours just outside it.
    #[test]
    fn ranges_are_classified_to_their_edges() {
        for (ip, want) in [
            // RFC 1918
            ("9.255.255.255", Public),
            ("10.0.0.0", Private),
            ("10.255.255.255", Private),
            ("11.0.0.0", Public),
            ("172.15.255.255", Public),
            ("172.16.0.0", Private),
            ("172.31.255.255", Private),
            ("172.32.0.0", Public),
            ("192.167.255.255", Public),
            ("192.168.0.0", Private),
            ("192.168.255.255", Private),
            ("192.169.0.0", Public),
            // loopback
            ("126.255.255.255", Public),
            ("127.0.0.0", Private),
            ("127.255.255.255", Private),
            ("128.0.0.0", Public),
            // CGNAT, with Alibaba's metadata address inside it
            ("100.63.255.255", Public),
            ("100.64.0.0", Private),
            ("100.127.255.255", Private),
            ("100.128.0.0", Public),
            ("100.100.100.199", Private),
            ("100.100.100.200", Blocked),
            ("100.100.100.201", Private),
            // IETF protocol assignments, benchmarking, class E
            ("191.255.255.255", Public),
            ("192.0.0.0", Private),
            ("192.0.0.255", Private),
            ("192.0.1.0", Public),
            ("198.17.255.255", Public),
            ("198.18.0.0", Private),
            ("198.19.255.255", Private),
            ("198.20.0.0", Public),
            ("240.0.0.0", Private),
            ("255.255.255.254", Private),
            ("255.255.255.255", Blocked),
            // this network, link-local, Azure's WireServer, multicast
            ("0.0.0.0", Blocked),
            ("0.255.255.255", Blocked),
            ("1.0.0.0", Public),
            ("169.253.255.255", Public),
            ("169.254.0.0", Blocked),
            ("169.254.169.254", Blocked),
            ("169.254.255.255", Blocked),
            ("169.255.0.0", Public),
            ("168.63.129.15", Public),
            ("168.63.129.16", Blocked),
            ("168.63.129.17", Public),
            ("223.255.255.255", Public),
            ("224.0.0.0", Blocked),
            ("239.255.255.255", Blocked),
            ("8.8.8.8", Public),
            // IPv6: loopback, unspecified, ULA, link-local, site-local, multicast
            ("::1", Private),
            ("::", Blocked),
            ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
            ("fc00::", Private),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private),
            ("fe00::", Public),
            ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
            ("fe80::", Blocked),
            ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Blocked),
            ("fec0::", Private),
            ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private),
            ("ff00::", Blocked),
            ("fd00:ec2::253", Private),
            ("fd00:ec2::254", Blocked),
            ("2001:db8::1", Public),
            ("2606:4700::1111", Public),
            // IPv4-mapped, -compatible, NAT64 and 6to4 forms reach their IPv4 address
            ("::ffff:10.0.0.1", Private),
            ("::ffff:127.0.0.1", Private),
            ("::ffff:100.64.0.0", Private),
            ("::ffff:169.254.169.254", Blocked),
            ("::ffff:168.63.129.16", Blocked),
            ("::ffff:8.8.8.8", Public),
            ("::10.0.0.1", Private),
            ("::169.254.169.254", Blocked),
            ("::8.8.8.8", Public),
            ("64:ff9b::a00:1", Private),
            ("64:ff9b::7f00:1", Private),
            ("64:ff9b::a9fe:a9fe", Blocked),
            ("64:ff9b::808:808", Public),
            ("64:ff9b:1::1", Private),
            ("2002:a00:1::1", Private),
            ("2002:a9fe:a9fe::1", Blocked),
            ("2002:808:808::1", Public),
        ] {
            let parsed: IpAddr = ip.parse().expect("an address");
            assert_eq!(classify(parsed), want, "{ip}");
        }
    }

    #[test]
    fn cidr_lists_parse_and_name_a_bad_entry() {
        let networks = PrivateNetworks::parse("10.0.0.0/8, 127.0.0.1,fd00::/8,").expect("valid");
        assert_eq!(networks.to_string(), "10.0.0.0/8,127.0.0.1/32,fd00::/8");
        assert_eq!(PrivateNetworks::default().to_string(), "none");
        for (list, bad) in [
            ("10.0.0.0/8,10.0.0/8", "10.0.0/8"),
            ("10.0.0.0/33", "10.0.0.0/33"),
            ("fd00::/129", "fd00::/129"),
            ("localhost", "localhost"),
            ("10.0.0.0/x", "10.0.0.0/x"),
        ] {
            let err = PrivateNetworks::parse(list).expect_err(list);
            assert_eq!(err.entry.trim(), bad, "{list}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn networks_cover_the_ipv4_an_ipv6_address_embeds() {
        let loopback = PrivateNetworks::parse("127.0.0.0/8").expect("valid");
        for (ip, covered) in [
            ("127.0.0.1", true),
            ("127.9.9.9", true),
            ("::ffff:127.0.0.1", true),
            ("64:ff9b::7f00:1", true),
            ("::1", false),
            ("10.0.0.1", false),
        ] {
            let parsed: IpAddr = ip.parse().expect("an address");
            assert_eq!(loopback.contains(parsed), covered, "{ip}");
        }
    }

    fn url(text: &str) -> Url {
        Url::parse(text).expect("a URL")
    }

    #[test]
    fn literals_need_an_allowance_and_blocked_ones_get_none() {
        let none = Reach::default();
        let cidr = Reach::new(PrivateNetworks::parse("10.0.0.0/8").expect("valid"), &[]);
        let any = Reach::new(PrivateNetworks::any(), &[]);
        let vouched = Reach::new(
            PrivateNetworks::default(),
            &["10.0.0.5:8080".into(), "[fd00::1]:5000".into()],
        );
        let private = |host: &str| {
            Err(Refused::Private {
                host: host.to_string(),
            })
        };
        let blocked = |host: &str| {
            Err(Refused::Blocked {
                host: host.to_string(),
            })
        };
        for (reach, target, want) in [
            (&none, "https://8.8.8.8/v2/", Ok(())),
            (&none, "http://10.0.0.5:8080/v2/", private("10.0.0.5")),
            (
                &none,
                "http://[::ffff:10.0.0.5]:8080/v2/",
                private("::ffff:10.0.0.5"),
            ),
            (&none, "http://127.0.0.1:15000/v2/", private("127.0.0.1")),
            (&cidr, "http://10.0.0.5:8080/v2/", Ok(())),
            (&cidr, "http://192.168.0.1/v2/", private("192.168.0.1")),
            (&any, "http://192.168.0.1/v2/", Ok(())),
            (&any, "http://[fd00::1]/v2/", Ok(())),
            (&vouched, "http://10.0.0.5:8080/v2/", Ok(())),
            (&vouched, "http://10.0.0.5:8081/v2/", private("10.0.0.5")),
            (&vouched, "http://10.0.0.6:8080/v2/", private("10.0.0.6")),
            (&vouched, "http://[fd00::1]:5000/v2/", Ok(())),
            // Metadata and link-local, whatever is allowed.
            (
                &any,
                "http://169.254.169.254/latest/",
                blocked("169.254.169.254"),
            ),
            (&any, "http://[fe80::1]/", blocked("fe80::1")),
            (&any, "http://0.0.0.0:15000/", blocked("0.0.0.0")),
            (&any, "http://168.63.129.16/", blocked("168.63.129.16")),
            (&none, "https://ghcr.io/v2/", Ok(())),
        ] {
            assert_eq!(reach.check_url(&url(target)), want, "{target}");
        }
    }

    #[test]
    fn a_vouched_name_is_vouched_for_on_its_own_port_only() {
        let reach = Reach::new(
            PrivateNetworks::default(),
            &["Registry.Internal:5000".into(), "mirror.internal".into()],
        );
        assert_eq!(
            reach.check_url(&url("http://registry.internal:5000/v2/")),
            Ok(())
        );
        assert_eq!(reach.check_url(&url("https://mirror.internal/v2/")), Ok(()));
        assert_eq!(
            reach.check_url(&url("https://mirror.internal:443/v2/")),
            Ok(())
        );
        let err = reach
            .check_url(&url("https://registry.internal:22/"))
            .expect_err("another port");
        assert!(err.to_string().contains("registry.internal:22"), "{err}");
        assert!(
            reach
                .check_url(&url("https://mirror.internal:8443/"))
                .is_err()
        );
        assert_eq!(reach.check_url(&url("https://other.internal:22/")), Ok(()));
    }

    #[test]
    fn resolved_addresses_are_filtered_and_a_name_left_with_none_is_refused() {
        let at = |ip: &str| SocketAddr::new(ip.parse().expect("an address"), 0);
        let none = Reach::default();
        let loopback = Reach::new(PrivateNetworks::parse("127.0.0.0/8").expect("valid"), &[]);
        let vouched = Reach::new(
            PrivateNetworks::default(),
            &["registry.internal:5000".into()],
        );

        // Public addresses pass; private and blocked ones are dropped from a mixed answer.
        assert_eq!(
            none.filter(
                "mixed.example",
                [at("10.0.0.1"), at("8.8.8.8"), at("169.254.169.254")]
            ),
            Ok(vec![at("8.8.8.8")])
        );
        assert_eq!(
            none.filter("localhost", [at("127.0.0.1"), at("::1")]),
            Err(Refused::PrivateName {
                host: "localhost".into()
            })
        );
        assert_eq!(
            loopback.filter("localhost", [at("127.0.0.1"), at("::1")]),
            Ok(vec![at("127.0.0.1")])
        );
        assert_eq!(
            vouched.filter("registry.internal", [at("10.0.0.5"), at("169.254.169.254")]),
            Ok(vec![at("10.0.0.5")])
        );
        assert_eq!(
            vouched.filter("other.internal", [at("10.0.0.5")]),
            Err(Refused::PrivateName {
                host: "other.internal".into()
            })
        );
        // Only blocked addresses: refused as such, whatever is allowed.
        let any = Reach::new(PrivateNetworks::any(), &[]);
        assert_eq!(
            any.filter("metadata.google.internal", [at("169.254.169.254")]),
            Err(Refused::BlockedName {
                host: "metadata.google.internal".into()
            })
        );
        let err = none
            .filter("registry.internal", [at("10.0.0.5")])
            .expect_err("private");
        assert_eq!(
            err.to_string(),
            "refused: registry.internal resolves to a private address; allow it with \
             --allow-private-registries or a PluginPolicy's registries"
        );
    }

    #[test]
    fn authorities_parse_as_policies_write_them() {
        for (text, want) in [
            ("ghcr.io", Some(("ghcr.io", None))),
            ("10.0.0.5:8080", Some(("10.0.0.5", Some(8080)))),
            ("[fd00::1]:5000", Some(("fd00::1", Some(5000)))),
            ("[fd00::1]", Some(("fd00::1", None))),
            ("fd00::1", Some(("fd00::1", None))),
            ("host:port", None),
            ("", None),
            ("[fd00::1", None),
        ] {
            let parsed = Authority::parse(text);
            let want = want.map(|(host, port)| Authority {
                host: host.to_string(),
                port,
            });
            assert_eq!(parsed, want, "{text:?}");
        }
    }
}
