//! Error numbers as libzmq reports them: the platform's own where it has one, and libzmq's private range
//! (`ZMQ_HAUSNUMERO` + n) for its native errors and for the `_ALT` spellings a build without the platform value
//! would use.

#![allow(missing_docs)]

const HAUSNUMERO: i32 = 156_384_712;

pub const EACCES: i32 = libc::EACCES;
pub const EADDRINUSE: i32 = libc::EADDRINUSE;
pub const EAGAIN: i32 = libc::EAGAIN;
pub const EBUSY: i32 = libc::EBUSY;
pub const ECONNREFUSED: i32 = libc::ECONNREFUSED;
pub const EFAULT: i32 = libc::EFAULT;
pub const EINTR: i32 = libc::EINTR;
pub const EHOSTUNREACH: i32 = libc::EHOSTUNREACH;
pub const EINPROGRESS: i32 = libc::EINPROGRESS;
pub const EINVAL: i32 = libc::EINVAL;
pub const EMFILE: i32 = libc::EMFILE;
pub const EMSGSIZE: i32 = libc::EMSGSIZE;
pub const ENAMETOOLONG: i32 = libc::ENAMETOOLONG;
pub const ENODEV: i32 = libc::ENODEV;
pub const ENOENT: i32 = libc::ENOENT;
pub const ENOMEM: i32 = libc::ENOMEM;
pub const ENOTCONN: i32 = libc::ENOTCONN;
pub const ENOTSOCK: i32 = libc::ENOTSOCK;
pub const EPROTO: i32 = libc::EPROTO;
pub const EPROTONOSUPPORT: i32 = libc::EPROTONOSUPPORT;
pub const ENOTSUP: i32 = libc::ENOTSUP;
pub const ENOBUFS: i32 = libc::ENOBUFS;
pub const ENETDOWN: i32 = libc::ENETDOWN;
pub const EADDRNOTAVAIL: i32 = libc::EADDRNOTAVAIL;

// libzmq's own numbers for the same conditions (zmq.h defines them only where the platform lacks them).
pub const ENOTSUP_ALT: i32 = HAUSNUMERO + 1;
pub const EPROTONOSUPPORT_ALT: i32 = HAUSNUMERO + 2;
pub const ENOBUFS_ALT: i32 = HAUSNUMERO + 3;
pub const ENETDOWN_ALT: i32 = HAUSNUMERO + 4;
pub const EADDRINUSE_ALT: i32 = HAUSNUMERO + 5;
pub const EADDRNOTAVAIL_ALT: i32 = HAUSNUMERO + 6;
pub const ECONNREFUSED_ALT: i32 = HAUSNUMERO + 7;
pub const EINPROGRESS_ALT: i32 = HAUSNUMERO + 8;
pub const ENOTSOCK_ALT: i32 = HAUSNUMERO + 9;
pub const EMSGSIZE_ALT: i32 = HAUSNUMERO + 10;
pub const EAFNOSUPPORT_ALT: i32 = HAUSNUMERO + 11;
pub const ENETUNREACH_ALT: i32 = HAUSNUMERO + 12;
pub const ECONNABORTED_ALT: i32 = HAUSNUMERO + 13;
pub const ECONNRESET_ALT: i32 = HAUSNUMERO + 14;
pub const ENOTCONN_ALT: i32 = HAUSNUMERO + 15;
pub const ETIMEDOUT_ALT: i32 = HAUSNUMERO + 16;
pub const EHOSTUNREACH_ALT: i32 = HAUSNUMERO + 17;
pub const ENETRESET_ALT: i32 = HAUSNUMERO + 18;

// libzmq's native errors.
pub const EFSM: i32 = HAUSNUMERO + 51;
pub const ENOCOMPATPROTO: i32 = HAUSNUMERO + 52;
pub const ETERM: i32 = HAUSNUMERO + 53;
pub const EMTHREAD: i32 = HAUSNUMERO + 54;
