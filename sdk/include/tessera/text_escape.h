// Escaping of untrusted text (manifest fields, file names, device and driver strings) for JSON and
// for a terminal. Header-only so that plugins, which never link libtessera, use the same code.
// Note [Untrusted text]: a string from a file, a driver or a plugin may hold control characters
// (an ESC reaches the terminal raw) and bytes that are not UTF-8 (JSON writers reject them). Every
// place that prints such text goes through json_escape or printable_text; neither throws.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

// Length (1..4) of the well-formed UTF-8 sequence that starts at s[i], or 0 when the bytes there are
// not one (a stray continuation byte, an overlong form, a surrogate, a value above U+10FFFF or a
// truncated sequence). `i` must be < s.size().
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 2;
  else if (b0 == 0xe0) n = 3, lo = 0xa0;
  else if (b0 == 0xed) n = 3, hi = 0x9f;
  else if (b0 >= 0xe1 && b0 <= 0xef) n = 3;
  else if (b0 == 0xf0) n = 4, lo = 0x90;
  else if (b0 >= 0xf1 && b0 <= 0xf3) n = 4;
  else if (b0 == 0xf4) n = 4, hi = 0x8f;
  else return 0;
  if (s.size() - i < n) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

// The body of a JSON string (without the quotes) for `s`: '"' and '\' escaped, control characters
// (U+0000-U+001F, U+007F-U+009F) as \n, \t, \r or \u00XX, and every byte that is not part of
// well-formed UTF-8 as \ufffd (the replacement character). The result is valid JSON and UTF-8.
inline std::string json_escape(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    uint32_t cp = static_cast<unsigned char>(s[i]);
    if (n == 2) cp = ((cp & 0x1f) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3f);
    if (n <= 2 && (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))) {
      switch (cp) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          out += "\\u00";
          out += kHex[cp >> 4];
          out += kHex[cp & 15];
      }
    } else if (cp == '"' || cp == '\\') {
      out += '\\';
      out += char(cp);
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

// `s` made safe to print on a terminal: control characters (C0, DEL and the C1 range U+0080-U+009F)
// and every byte that is not part of well-formed UTF-8 become \xNN (one per byte); everything else,
// backslashes included, is kept as it is.
inline std::string printable_text(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const auto hex_byte = [&](unsigned char b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char b0 = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_sequence_length(s, i);
    const bool c1 = n == 2 && b0 == 0xc2 && static_cast<unsigned char>(s[i + 1]) <= 0x9f;
    if (n == 0 || (n == 1 && (b0 < 0x20 || b0 == 0x7f))) {
      hex_byte(b0);
      ++i;
    } else if (c1) {
      hex_byte(b0);
      hex_byte(static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace tessera
