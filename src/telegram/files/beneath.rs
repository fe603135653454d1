//! Files reached through a directory's descriptor, never by a path name
//! that could change between a check and a use: a conversation's working
//! directory is opened once (`O_DIRECTORY | O_NOFOLLOW`), and everything in
//! it is reached from that descriptor with no symlink on any component.
//!
//! The agent can write its working directory, and so swap any name in it
//! for a symlink at any moment; turnstile follows nothing it put there.
//! `open_beneath` uses `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and
//! falls back to a walk of `O_NOFOLLOW` opens, one component at a time,
//! where the kernel has no `openat2`.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

/// `struct open_how` of `openat2(2)` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// How a file to read is opened: never a controlling terminal, never
/// blocked on a FIFO (`fstat` then refuses anything but a regular file).
const READ_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

/// An open directory.
#[derive(Debug)]
pub struct Dir {
    /// The descriptor every name is looked up from.
    fd: OwnedFd,
}

/// A name in a directory, as a C string; refused when it is not one
/// plain component.
fn component(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` is not a plain name", name.to_string_lossy()),
        ));
    }
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a name"))
}

/// The descriptor a successful call answered, or the OS error.
fn owned(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel, open, and owned by no
    // one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags, mode)`.
fn openat(
    dir: RawFd,
    name: &CString,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string; the kernel checks the rest.
    owned(unsafe { libc::openat(dir, name.as_ptr(), flags, libc::c_uint::from(mode)) })
}

/// Whether `name` in the directory `at` is a symlink itself.
fn is_symlink(at: RawFd, name: &CString) -> bool {
    // SAFETY: an all-zero `stat` is a valid value of the plain C struct.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a valid C string and `stat` is writable.
    let done = unsafe { libc::fstatat(at, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) };
    done == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFLNK
}

impl Dir {
    /// Opens the directory at `path`; refused when its last component is a
    /// symlink. (The components before it are the operator's.)
    pub fn open(path: &Path) -> io::Result<Self> {
        let name = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        openat(libc::AT_FDCWD, &name, flags, 0).map(|fd| Self { fd })
    }

    /// Creates the directory at `path` (and its parents) 0700 when missing,
    /// then opens it as [`Dir::open`] does.
    pub fn create(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)?;
        Self::open(path)
    }

    /// The directory `name` in this one, made 0700 when `create` and
    /// missing; refused when it is a symlink or not a directory.
    pub fn subdir(&self, name: &str, create: bool) -> io::Result<Self> {
        let name = component(OsStr::new(name))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        match openat(self.fd.as_raw_fd(), &name, flags, 0) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                // SAFETY: `name` is a valid C string.
                let made = unsafe { libc::mkdirat(self.fd.as_raw_fd(), name.as_ptr(), 0o700) };
                if made != 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() != io::ErrorKind::AlreadyExists {
                        return Err(err);
                    }
                }
                openat(self.fd.as_raw_fd(), &name, flags, 0).map(|fd| Self { fd })
            }
            other => other.map(|fd| Self { fd }),
        }
    }

    /// Creates the file `name` here, 0600, for writing: only where nothing
    /// is (`O_EXCL`), never through a symlink.
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        let name = component(OsStr::new(name))?;
        let flags = libc::O_WRONLY
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NOCTTY;
        openat(self.fd.as_raw_fd(), &name, flags, 0o600).map(File::from)
    }

    /// Removes the entry `name` here (a file or a symlink itself, never
    /// what a symlink points to).
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        let name = component(name)?;
        // SAFETY: `name` is a valid C string.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The entry `name` here, not followed when it is a symlink.
    fn lstat(&self, name: &OsStr) -> io::Result<libc::stat> {
        let name = component(name)?;
        // SAFETY: an all-zero `stat` is a valid value of the plain C struct.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `name` is a valid C string and `stat` is writable.
        let done = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut stat,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stat)
    }

    /// The names here (not `.` and `..`).
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // A fresh open of the same directory: `fdopendir` takes its
        // descriptor, and its reading position is its own.
        let fresh = openat(
            self.fd.as_raw_fd(),
            &CString::from(c"."),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fresh);
        // SAFETY: `raw` is an open directory descriptor we own; on success
        // the stream owns it and `closedir` closes it.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            let err = io::Error::last_os_error();
            // SAFETY: `fdopendir` failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(err);
        }
        let mut names = Vec::new();
        loop {
            // SAFETY: `stream` is a live directory stream.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: `d_name` of a live entry is a NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(OsStr::from_bytes(bytes).to_owned());
            }
        }
        // SAFETY: `stream` is live and closed once.
        unsafe { libc::closedir(stream) };
        Ok(names)
    }

    /// Removes every entry here that is not a directory and was last
    /// modified more than `age` ago (a symlink by its own time: removing it
    /// never touches what it points to). Answers how many went.
    pub fn remove_older_than(&self, age: Duration, now: SystemTime) -> io::Result<usize> {
        let Some(cutoff) = now.checked_sub(age) else {
            return Ok(0);
        };
        let cutoff = cutoff
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let mut removed = 0;
        for name in self.names()? {
            let Ok(stat) = self.lstat(&name) else {
                continue;
            };
            if stat.st_mode & libc::S_IFMT == libc::S_IFDIR || stat.st_mtime >= cutoff {
                continue;
            }
            match self.remove_file(&name) {
                Ok(()) => removed += 1,
                Err(err) => {
                    tracing::warn!(file = %name.to_string_lossy(), cause = %err, "old inbox file not removed")
                }
            }
        }
        Ok(removed)
    }

    /// Opens `relative` beneath this directory for reading: no component
    /// may be a symlink and none may lead out of it (`..` only within).
    /// `ELOOP` says a symlink was met, `EXDEV` that the path leads out.
    /// Without `openat2` (`ENOSYS`, or `EPERM` from a seccomp filter that
    /// does not know it) the walk does the same.
    pub fn open_beneath(&self, relative: &Path) -> io::Result<File> {
        match self.openat2(relative) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                self.walk(relative)
            }
            other => other,
        }
    }

    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`.
    fn openat2(&self, relative: &Path) -> io::Result<File> {
        let path = CString::new(relative.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?;
        let how = OpenHow {
            flags: READ_FLAGS as u64,
            mode: 0,
            resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
        };
        // SAFETY: `path` is a valid C string and `how` a valid `open_how` of
        // the size given; the kernel answers a new descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        let fd = RawFd::try_from(fd).unwrap_or(-1);
        owned(fd).map(File::from)
    }

    /// The fallback of [`Dir::open_beneath`]: one `O_NOFOLLOW` open per
    /// component from this descriptor; `..` goes back to a directory
    /// already opened on the way (never above this one, never through the
    /// file system's own `..`).
    fn walk(&self, relative: &Path) -> io::Result<File> {
        let mut parts: Vec<&OsStr> = Vec::new();
        for part in relative.components() {
            match part {
                Component::Normal(name) => parts.push(name),
                Component::CurDir => {}
                Component::ParentDir => parts.push(OsStr::new("..")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(io::Error::from_raw_os_error(libc::EXDEV));
                }
            }
        }
        let Some((last, dirs)) = parts.split_last() else {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        };
        // The directories opened on the way down, the deepest last.
        let mut stack: Vec<OwnedFd> = Vec::new();
        let dir_flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        for part in dirs {
            if *part == ".." {
                stack
                    .pop()
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EXDEV))?;
                continue;
            }
            let at = stack.last().map_or(self.fd.as_raw_fd(), AsRawFd::as_raw_fd);
            let name = component(part)?;
            match openat(at, &name, dir_flags, 0) {
                Ok(fd) => stack.push(fd),
                // A symlink opened with `O_DIRECTORY | O_NOFOLLOW` is "not a
                // directory"; say what it is, as `openat2` would.
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) && is_symlink(at, &name) => {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                Err(e) => return Err(e),
            }
        }
        if *last == ".." {
            return Err(io::Error::from_raw_os_error(if stack.is_empty() {
                libc::EXDEV
            } else {
                libc::EISDIR
            }));
        }
        let at = stack.last().map_or(self.fd.as_raw_fd(), AsRawFd::as_raw_fd);
        openat(at, &component(last)?, READ_FLAGS | libc::O_NOFOLLOW, 0).map(File::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// A workdir `ws` with a file, a subdirectory, symlinks in and out,
    /// and a secret beside it.
    fn tree() -> (tempfile::TempDir, Dir) {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
        std::fs::write(ws.join("ok.txt"), "ok").unwrap();
        std::fs::write(ws.join("sub/deeper/in.txt"), "in").unwrap();
        std::fs::write(base.path().join("secret"), "secret").unwrap();
        std::os::unix::fs::symlink(base.path().join("secret"), ws.join("out")).unwrap();
        std::os::unix::fs::symlink(ws.join("ok.txt"), ws.join("in-link")).unwrap();
        std::os::unix::fs::symlink(base.path(), ws.join("updir")).unwrap();
        std::os::unix::fs::symlink("sub", ws.join("subl")).unwrap();
        let dir = Dir::open(&ws).unwrap();
        (base, dir)
    }

    /// What each way of opening makes of each path: the text read, or the
    /// errno.
    fn outcomes(open: impl Fn(&Path) -> io::Result<File>) -> Vec<(String, Result<String, i32>)> {
        [
            "ok.txt",
            "./ok.txt",
            "sub/deeper/in.txt",
            "sub/deeper/../../ok.txt",
            "sub/../sub/deeper/in.txt",
            "out",
            "in-link",
            "updir/secret",
            "subl/deeper/in.txt",
            "sub/../../secret",
            "../secret",
            "..",
            "missing",
        ]
        .iter()
        .map(|p| {
            let got = open(Path::new(p)).and_then(|mut f| {
                let mut text = String::new();
                f.read_to_string(&mut text).map(|_| text)
            });
            (
                p.to_string(),
                got.map_err(|e| e.raw_os_error().unwrap_or(0)),
            )
        })
        .collect()
    }

    #[test]
    fn open_beneath_follows_no_symlink_and_never_leaves_the_directory() {
        let (_base, dir) = tree();
        let seen = outcomes(|p| dir.openat2(p));
        let want: Vec<(String, Result<String, i32>)> = vec![
            ("ok.txt".into(), Ok("ok".into())),
            ("./ok.txt".into(), Ok("ok".into())),
            ("sub/deeper/in.txt".into(), Ok("in".into())),
            ("sub/deeper/../../ok.txt".into(), Ok("ok".into())),
            ("sub/../sub/deeper/in.txt".into(), Ok("in".into())),
            ("out".into(), Err(libc::ELOOP)),
            ("in-link".into(), Err(libc::ELOOP)),
            ("updir/secret".into(), Err(libc::ELOOP)),
            ("subl/deeper/in.txt".into(), Err(libc::ELOOP)),
            ("sub/../../secret".into(), Err(libc::EXDEV)),
            ("../secret".into(), Err(libc::EXDEV)),
            ("..".into(), Err(libc::EXDEV)),
            ("missing".into(), Err(libc::ENOENT)),
        ];
        assert_eq!(seen, want);
        // The walk (where the kernel has no openat2) refuses the same; `..`
        // alone is not a file either way.
        let walked = outcomes(|p| dir.walk(p));
        assert_eq!(walked, want);
        assert_eq!(
            dir.walk(Path::new("/etc/passwd"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EXDEV)
        );
    }

    #[test]
    fn a_subdir_is_made_private_and_a_symlink_is_no_subdir() {
        let (base, dir) = tree();
        let made = dir.subdir("inbox", true).unwrap();
        made.create_file("a").unwrap();
        assert!(base.path().join("ws/inbox/a").is_file());
        assert!(made.create_file("a").is_err(), "never twice");
        assert_eq!(
            dir.subdir("subl", true).unwrap_err().raw_os_error(),
            Some(libc::ENOTDIR)
        );
        assert!(dir.subdir("..", false).is_err());
        assert!(dir.subdir("a/b", false).is_err());
        let mut names = dir.names().unwrap();
        names.sort();
        assert_eq!(
            names,
            ["in-link", "inbox", "ok.txt", "out", "sub", "subl", "updir"].map(OsString::from)
        );
        dir.remove_file(OsStr::new("out")).unwrap();
        assert!(
            base.path().join("secret").exists(),
            "the link went, not its target"
        );
    }
}
