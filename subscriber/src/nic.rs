//! Connecting from a network interface (`nic` of a shard, `--nic`): the endpoint rewrite, and the start-up check
//! of the name, since a shard told to connect from an interface that does not exist (or has no address) would
//! otherwise connect to nothing and wait forever, silently.

use std::ffi::{CStr, CString};

use crate::SubscriberError;

/// Why an interface cannot be used.
fn nic_error(nic: &str, reason: &str) -> SubscriberError {
    SubscriberError::Nic {
        nic: nic.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Checks that network interface `nic` exists and has an IPv4 address (ZeroMQ's source-interface connect,
/// `tcp://IFACE:0;host:port`, binds the connection to that address).
///
/// # Errors
///
/// [`SubscriberError::Nic`] naming the interface and the reason: a malformed name, no such interface, no IPv4
/// address, or the address list could not be read.
// Unsafe allowed here only: libc's if_nametoindex/getifaddrs are the sole way to ask the kernel about interfaces.
#[allow(unsafe_code)]
pub fn check_nic(nic: &str) -> Result<(), SubscriberError> {
    if nic.is_empty() || nic.len() >= libc::IFNAMSIZ || nic.contains([':', ';', '/', ' ']) {
        return Err(nic_error(nic, "is not a valid interface name"));
    }
    let name = CString::new(nic).map_err(|_| nic_error(nic, "is not a valid interface name"))?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::if_nametoindex(name.as_ptr()) } == 0 {
        return Err(nic_error(nic, "no such network interface"));
    }
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(nic_error(
            nic,
            &format!(
                "cannot list interface addresses: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    let mut has_v4 = false;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_name.is_null() && !ifa.ifa_addr.is_null() {
            // SAFETY: `ifa_name` is non-null and points to a NUL-terminated name inside the live list.
            let same = unsafe { CStr::from_ptr(ifa.ifa_name) }.to_bytes() == nic.as_bytes();
            // SAFETY: `ifa_addr` is non-null and points to a sockaddr inside the live list.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if same && family == libc::AF_INET {
                has_v4 = true;
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    if has_v4 {
        Ok(())
    } else {
        Err(nic_error(nic, "has no IPv4 address"))
    }
}

/// The NIC endpoint rewrite, with its error in this crate's terms.
pub(crate) fn endpoint_via_nic(endpoint: &str, nic: &str) -> Result<String, SubscriberError> {
    tickbox_zmqx::endpoint_via_nic(endpoint, nic)
        .map_err(|e| SubscriberError::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_passes_and_missing_or_malformed_names_fail_with_the_name() {
        check_nic("lo").unwrap();
        for (name, reason) in [
            ("nosuch0", "no such network interface"),
            ("", "not a valid interface name"),
            ("eth0;x", "not a valid interface name"),
            (
                "a-name-far-too-long-for-linux",
                "not a valid interface name",
            ),
        ] {
            let err = check_nic(name).unwrap_err().to_string();
            assert!(err.contains(reason), "{name}: {err}");
            assert!(err.contains(&format!("{name:?}")), "{err}");
        }
    }
}
