"""The content of an example invoice, generated deterministically from its id.

A real handler would load the invoice from the database; the example derives it from a seeded
random generator instead, so that a retry renders exactly the same document and tests can
compare two renders byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
TAX_RATE = Decimal("0.0825")
PAYMENT_TERMS_DAYS = 30
# Issue dates walk through one year from here, so every id gets a stable, plausible date.
EPOCH = date(2025, 1, 1)

SELLER = (
    "Brightline Print Co.",
    "418 Harbour Street, Unit 7",
    "Portland, OR 97204",
    "billing@brightline.example",
)

# (description, unit, lowest price, highest price): a print shop's catalogue.
CATALOGUE = (
    ("Tri-fold brochure, A4, 4/4 colour on 170 g silk", "pcs", "0.18", "0.42"),
    ("Business cards, 85x55 mm, 400 g matt laminated", "box", "14.00", "39.00"),
    ("Roll-up banner 85x200 cm with aluminium stand and carry bag", "pcs", "79.00", "149.00"),
    ("Perfect-bound catalogue, 64 pages + cover, 130 g gloss", "pcs", "3.10", "7.80"),
    ("Letterhead, 120 g uncoated, 1/0 spot colour", "pcs", "0.07", "0.19"),
    ("Die-cut stickers, 50 mm circle, weatherproof vinyl", "pcs", "0.11", "0.35"),
    ("Prepress: colour proofing and imposition, per hour", "h", "45.00", "75.00"),
    ("Design revision round (layout and copy changes)", "h", "55.00", "95.00"),
    ("Foil stamping plate, custom artwork", "pcs", "60.00", "140.00"),
    ("Poster, A2, 200 g satin, full bleed", "pcs", "0.90", "2.60"),
    ("Envelope C5, printed return address, self-seal", "pcs", "0.06", "0.16"),
    ("Courier delivery, next business day, per parcel", "parcel", "12.00", "28.00"),
    ("Wire-O binding, report 120 pages, clear front cover", "pcs", "4.50", "9.90"),
    ("Large-format print on foam board, 70x100 cm", "pcs", "38.00", "72.00"),
)

# Catalogue items cheaper than this are ordered in bulk.
BULK_BELOW = Decimal("10.00")

CAMPAIGNS = ("Spring catalogue", "Trade fair", "Store opening", "Annual report", "Re-brand")
STREETS = ("Maple Avenue", "Quayside Road", "Old Mill Lane", "Station Square", "Elm Court")
CITIES = (
    ("Seattle, WA", "981"),
    ("Boise, ID", "837"),
    ("Sacramento, CA", "958"),
    ("Eugene, OR", "974"),
    ("Spokane, WA", "992"),
)


@dataclass(frozen=True, slots=True)
class LineItem:
    description: str
    quantity: int
    unit: str
    unit_price: Decimal

    @property
    def amount(self) -> Decimal:
        return (self.unit_price * self.quantity).quantize(CENT, ROUND_HALF_UP)


@dataclass(frozen=True, slots=True)
class Invoice:
    number: str
    customer: str
    customer_address: tuple[str, ...]
    purchase_order: str
    issued: date
    due: date
    items: tuple[LineItem, ...]

    @property
    def subtotal(self) -> Decimal:
        return sum((item.amount for item in self.items), Decimal("0.00"))

    @property
    def tax(self) -> Decimal:
        return (self.subtotal * TAX_RATE).quantize(CENT, ROUND_HALF_UP)

    @property
    def total(self) -> Decimal:
        return self.subtotal + self.tax


def money(value: Decimal) -> str:
    return f"${value:,.2f}"


def build_invoice(invoice_id: int, customer: str, lines: int) -> Invoice:
    rng = random.Random(invoice_id)
    issued = EPOCH + timedelta(days=(invoice_id * 7) % 365)
    city, zip_prefix = rng.choice(CITIES)
    address = (
        f"Attn: Accounts Payable, ref. {rng.randint(1000, 9999)}",
        f"{rng.randint(1, 999)} {rng.choice(STREETS)}",
        f"{city} {zip_prefix}{rng.randint(10, 99)}",
    )
    return Invoice(
        number=f"INV-{invoice_id:06d}",
        customer=customer,
        customer_address=address,
        purchase_order=f"PO-{rng.randint(10_000, 99_999)}",
        issued=issued,
        due=issued + timedelta(days=PAYMENT_TERMS_DAYS),
        items=tuple(_line_item(rng) for _ in range(lines)),
    )


def _line_item(rng: random.Random) -> LineItem:
    description, unit, low, high = rng.choice(CATALOGUE)
    # Prices in whole cents between the catalogue bounds; cheap goods sell by the hundred.
    cents = rng.randint(int(Decimal(low) * 100), int(Decimal(high) * 100))
    quantity = rng.randint(1, 40) * 50 if Decimal(high) < BULK_BELOW else rng.randint(1, 12)
    if rng.random() < 0.3:
        description = f"{description} ({rng.choice(CAMPAIGNS)} campaign)"
    return LineItem(description, quantity, unit, Decimal(cents) / 100)
