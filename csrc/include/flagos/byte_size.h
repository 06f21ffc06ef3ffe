/*
 * Byte sizes in environment variables ("123", "64K", "512M", "2G", "1T"; powers
 * of 1024), shared by accelerators that take a memory limit from the
 * environment. Header-only C++, no torch.
 */
#ifndef FLAGOS_BYTE_SIZE_H
#define FLAGOS_BYTE_SIZE_H

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace flagos {

// The number of bytes `text` names; *ok is false (and 0 returned) if it names
// none. A limit must be a real amount of memory: zero, less than one byte,
// infinity, NaN and sizes past 2^62 bytes are refused, not read as "unlimited".
inline uint64_t parse_byte_size(const char* text, bool* ok) {
  *ok = false;
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || !std::isfinite(value) || value <= 0) return 0;
  std::string suffix(end);
  double scale = 1;
  if (suffix == "" || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KiB") scale = 1ull << 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MiB") scale = 1ull << 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GiB") scale = 1ull << 30;
  else if (suffix == "T" || suffix == "TB" || suffix == "TiB") scale = 1ull << 40;
  else return 0;
  double bytes = value * scale;
  if (bytes < 1 || bytes > static_cast<double>(1ull << 62)) return 0;
  *ok = true;
  return static_cast<uint64_t>(bytes);
}

// What a vendor writes when parse_byte_size refuses `value` of `variable`.
inline std::string bad_byte_size_message(const char* variable, const char* value) {
  return std::string(variable) + "='" + value +
         "' is not a memory size: use a positive number of bytes with an optional K, M, G or T suffix "
         "(e.g. 512M, 2G)";
}

}  // namespace flagos

#endif /* FLAGOS_BYTE_SIZE_H */
