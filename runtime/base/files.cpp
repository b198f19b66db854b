//===- files.cpp - bounded whole-file reads -------------------------------===//
#include "runtime/base/files.h"

#include "runtime/base/error.h"

#include <cerrno>
#include <cstring>
#include <iomanip>

#include <fcntl.h>
#include <sys/stat.h>

namespace glm::rt {
namespace {

/// "1.5 GiB", "16 MiB", "512 bytes": limits in messages.
std::string sizeText(uint64_t n) {
  const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = (double)n;
  while (v >= 1024 && u < 4)
    v /= 1024, ++u;
  std::ostringstream os;
  if (u == 0)
    os << n << " bytes";
  else
    os << (v == (double)(uint64_t)v ? std::fixed : std::defaultfloat)
       << std::setprecision(v == (double)(uint64_t)v ? 0 : 3) << v << " "
       << units[u];
  return os.str();
}

/// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

std::string readFileBounded(const std::string &path, uint64_t maxBytes,
                            const std::string &what) {
  // O_NONBLOCK: opening a FIFO with no writer must not block; it is refused
  // below as not a regular file.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  check(f.fd >= 0, path, ": cannot open ", what, " (", std::strerror(errno),
        ")");
  struct stat st;
  check(::fstat(f.fd, &st) == 0, path, ": cannot stat ", what, " (",
        std::strerror(errno), ")");
  check(S_ISREG(st.st_mode), path, ": ", what, " must be a regular file, "
        "not ", S_ISDIR(st.st_mode) ? "a directory"
                : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                : S_ISFIFO(st.st_mode) ? "a pipe"
                : "a special file",
        "; give the path of the file itself");
  const uint64_t size = (uint64_t)st.st_size;
  check(size <= maxBytes, path, ": ", what, " is ", size, " bytes (",
        sizeText(size), "), more than the ", sizeText(maxBytes),
        " such a file may have; it is damaged or not ", what);
  std::string out;
  out.resize(size);
  size_t have = 0;
  // Read at most one byte past the stat size: a file that grows while being
  // read is refused rather than followed.
  while (have <= size) {
    char extra;
    char *dst = have < size ? &out[have] : &extra;
    size_t want = have < size ? size - have : 1;
    ssize_t got = ::read(f.fd, dst, want);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    check(got >= 0, path, ": cannot read ", what, " (", std::strerror(errno),
          ")");
    if (got == 0)
      break;
    have += (size_t)got;
  }
  check(have == size, path, ": ", what, " changed size while being read (",
        size, " bytes at the start, ", have, " read); read it again once it "
        "is complete");
  return out;
}

} // namespace glm::rt
