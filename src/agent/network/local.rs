//! This host's own addresses, which a wildcard entry never opens.

use std::net::IpAddr;

/// Whether `ip` is this host's own: loopback, unspecified, link-local,
/// or one of `own` (its interfaces' addresses), IPv4-mapped ones too.
pub(super) fn is_local(ip: IpAddr, own: &[IpAddr]) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    };
    let special = match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback() || v4.is_unspecified() || v4.is_link_local() || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    special || own.contains(&ip)
}

/// The addresses of this host's interfaces.
pub(super) fn host_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list freed below.
    if unsafe { libc::getifaddrs(&raw mut list) } != 0 {
        return out;
    }
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made.
        let node = unsafe { &*at };
        if !node.ifa_addr.is_null() {
            // SAFETY: a non-null ifa_addr points at a sockaddr of its family.
            let family = i32::from(unsafe { (*node.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*node.ifa_addr.cast::<libc::sockaddr_in>() };
                out.push(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*node.ifa_addr.cast::<libc::sockaddr_in6>() };
                out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        at = node.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}
