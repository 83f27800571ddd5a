#include "areal/text/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

namespace areal::jinja {

Value Arguments::get(size_t index, const std::string& name, const Value& fallback) const {
  for (const auto& [key, value] : keyword)
    if (key == name) return value;
  return index < positional.size() ? positional[index] : fallback;
}

Value Value::undefined(std::string what) {
  Value v;
  v.string_ = std::move(what);
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::None;
  return v;
}
Value::Value(bool b) : type_(Type::Bool), bool_(b) {}
Value::Value(int64_t i) : type_(Type::Int), int_(i) {}
Value::Value(double f) : type_(Type::Float), float_(f) {}
Value::Value(std::string s) : type_(Type::String), string_(std::move(s)) {}
Value::Value(ValueList items) : type_(Type::List), list_(std::make_shared<ValueList>(std::move(items))) {}
Value::Value(ValueDict items, bool is_namespace)
    : type_(Type::Dict), dict_(std::make_shared<ValueDict>(std::move(items))), namespace_(is_namespace) {}
Value::Value(Function fn) : type_(Type::Function), function_(std::make_shared<Function>(std::move(fn))) {}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      for (const auto& item : j) items.push_back(from_json(item));
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      for (const auto& [key, item] : j.items()) items.emplace_back(key, from_json(item));
      return Value(std::move(items));
    }
    default: return Value();
  }
}

bool Value::is_namespace() const { return type_ == Type::Dict && namespace_; }

int64_t Value::as_int() const { return type_ == Type::Bool ? (bool_ ? 1 : 0) : int_; }

double Value::as_double() const { return type_ == Type::Float ? float_ : static_cast<double>(as_int()); }

Value* Value::find(const std::string& key) const {
  if (type_ != Type::Dict) return nullptr;
  for (auto& [k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (type_) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return bool_;
    case Type::Int: return int_ != 0;
    case Type::Float: return float_ != 0;
    case Type::String: return !string_.empty();
    case Type::List: return !list_->empty();
    case Type::Dict: return !dict_->empty();
    case Type::Function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List: return "list";
    case Type::Dict: return namespace_ ? "Namespace" : "dict";
    case Type::Function: return "function";
  }
  return "?";
}

std::string python_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // The shortest %.Ne that reads back exactly, then Python's layout of repr().
  char digits[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(digits, sizeof digits, "%.*e", precision - 1, f);
    if (std::strtod(digits, nullptr) == f) break;
  }
  std::string text(digits);
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string mantissa = text.substr(0, e);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  mantissa.erase(std::remove(mantissa.begin(), mantissa.end(), '.'), mantissa.end());
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = mantissa.substr(0, 1);
    if (mantissa.size() > 1) out += "." + mantissa.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0." + std::string(-exponent - 1, '0') + mantissa;
  } else if (static_cast<size_t>(exponent) + 1 >= mantissa.size()) {
    out = mantissa + std::string(exponent + 1 - mantissa.size(), '0') + ".0";
  } else {
    out = mantissa.substr(0, exponent + 1) + "." + mantissa.substr(exponent + 1);
  }
  return negative ? "-" + out : out;
}

namespace {

std::string python_repr_string(const std::string& s) {
  const bool single = s.find('\'') == std::string::npos || s.find('"') != std::string::npos;
  const char quote = single ? '\'' : '"';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else out += static_cast<char>(c);
  }
  return out + quote;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void write_json(const Value& v, int indent, int depth, const std::string& item_sep, const std::string& key_sep,
                bool sort_keys, std::string& out) {
  const std::string newline = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
  const std::string closing = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * depth, ' ') : "";
  switch (v.type()) {
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: {
      const double f = v.as_double();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : python_float(f);
      return;
    }
    case Value::Type::String: out += json_string(v.as_string()); return;
    case Value::Type::List: {
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        out += i == 0 ? newline : item_sep + newline;
        write_json(v.list()[i], indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      out += closing + "]";
      return;
    }
    case Value::Type::Dict: {
      if (v.dict().empty()) {
        out += "{}";
        return;
      }
      ValueDict items = v.dict();
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += "{";
      for (size_t i = 0; i < items.size(); ++i) {
        out += i == 0 ? newline : item_sep + newline;
        out += json_string(items[i].first) + key_sep;
        write_json(items[i].second, indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      out += closing + "}";
      return;
    }
    default: throw JinjaError("tojson: Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::str() const {
  switch (type_) {
    case Type::Undefined: return "";
    case Type::String: return string_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (type_) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return bool_ ? "True" : "False";
    case Type::Int: return std::to_string(int_);
    case Type::Float: return python_float(float_);
    case Type::String: return python_repr_string(string_);
    case Type::List: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      return out + "]";
    }
    case Type::Dict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + python_repr_string((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      return out + (namespace_ ? "}>" : "}");
    }
    case Type::Function: return "<function>";
  }
  return "";
}

std::string Value::to_json(int indent, const std::string& item_separator, const std::string& key_separator,
                           bool sort_keys) const {
  std::string out;
  const std::string item_sep = !item_separator.empty() ? item_separator : indent >= 0 ? "," : ", ";
  write_json(*this, indent, 0, item_sep, key_separator, sort_keys, out);
  return out;
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type() == Value::Type::Float || b.type() == Value::Type::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return true;
    case Value::Type::String: return a.as_string() == b.as_string();
    case Value::Type::List: return a.list() == b.list();
    case Value::Type::Dict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, value] : a.dict()) {
        const Value* other = b.find(key);
        if (!other || !(*other == value)) return false;
      }
      return true;
    }
    default: return &a.function() == &b.function();
  }
}

std::u32string utf8_to_utf32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int extra = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    char32_t cp = extra == 0 ? c : extra == 1 ? (c & 0x1F) : extra == 2 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k <= extra && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += 1 + extra;
  }
  return out;
}

std::string utf32_to_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

}  // namespace areal::jinja
