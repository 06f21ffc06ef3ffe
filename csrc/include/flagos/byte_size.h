/*
 * Byte sizes in environment variables ("123", "64K", "512M", "2G"; powers of
 * 1024), shared by accelerators that take a memory limit from the
 * environment. Header-only C++, no torch.
 */
#ifndef FLAGOS_BYTE_SIZE_H
#define FLAGOS_BYTE_SIZE_H

#include <cstdint>
#include <cstdlib>
#include <string>

namespace flagos {

// The number of bytes `text` names; *ok is false (and 0 returned) if it names none.
inline uint64_t parse_byte_size(const char* text, bool* ok) {
  *ok = false;
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || value < 0) return 0;
  std::string suffix(end);
  uint64_t scale = 1;
  if (suffix == "" || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KiB") scale = 1ull << 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MiB") scale = 1ull << 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GiB") scale = 1ull << 30;
  else return 0;
  *ok = true;
  return static_cast<uint64_t>(value * static_cast<double>(scale));
}

}  // namespace flagos

#endif /* FLAGOS_BYTE_SIZE_H */
