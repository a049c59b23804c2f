"""The look of an example invoice: an A4 document laid out with fpdf2, rendered in memory."""

from __future__ import annotations

from datetime import datetime, time, timezone

from fpdf import FPDF, FontFace

from .invoice_data import PAYMENT_TERMS_DAYS, SELLER, TAX_RATE, Invoice, money

NAVY = (24, 44, 84)
TEAL = (0, 150, 160)
AMBER = (242, 169, 59)
INK = (33, 37, 41)
GREY = (110, 117, 125)
RULE = (210, 214, 220)
ZEBRA = (244, 246, 250)

MARGIN = 15.0
FOOTER_SPACE = 22.0
# Room the totals and payment notes need; they move to a new page rather than split.
CLOSING_HEIGHT = 62.0

COLUMNS = ("#", "Description", "Qty", "Unit", "Unit price", "Amount")
COLUMN_WIDTHS = (10, 86, 14, 12, 22, 26)
COLUMN_ALIGN = ("RIGHT", "LEFT", "RIGHT", "LEFT", "RIGHT", "RIGHT")


class InvoicePDF(FPDF):
    def __init__(self, invoice: Invoice) -> None:
        super().__init__(orientation="portrait", unit="mm", format="A4")
        self.invoice = invoice
        # Windows-1252 gives the core fonts typographic dashes and quotes without embedding a
        # TTF font (embedding would make every invoice ~100 KB larger).
        self.core_fonts_encoding = "windows-1252"
        self.set_margins(MARGIN, MARGIN, MARGIN)
        self.set_auto_page_break(True, margin=FOOTER_SPACE)
        # A fixed creation date (the issue date) makes the output, including the file /ID
        # derived from it, identical on every render: a retry rewrites the same bytes.
        self.set_creation_date(datetime.combine(invoice.issued, time(9, 0), tzinfo=timezone.utc))
        self.set_title(f"Invoice {invoice.number}")
        self.set_author(SELLER[0])
        self.set_subject(f"Invoice {invoice.number} for {invoice.customer}")
        self.set_creator("pgq-supervisor examples")

    def header(self) -> None:
        self._logo(MARGIN, 12)
        self.set_text_color(*NAVY)
        self.set_xy(MARGIN + 17, 12.5)
        self.set_font("Helvetica", "B", 15)
        self.cell(60, 7, "Brightline")
        self.set_xy(MARGIN + 17, 19)
        self.set_font("Helvetica", "", 7.5)
        self.set_text_color(*GREY)
        self.cell(60, 4, "P R I N T   C O .")
        self.set_xy(self.w - MARGIN - 90, 12)
        if self.page_no() == 1:
            self.set_font("Helvetica", "B", 22)
            self.set_text_color(*NAVY)
            self.cell(90, 11, "INVOICE", align="R")
        else:
            self.set_font("Helvetica", "", 9)
            self.set_text_color(*GREY)
            self.cell(90, 11, f"Invoice {self.invoice.number} \u2014 continued", align="R")
        self.set_draw_color(*TEAL)
        self.set_line_width(0.6)
        self.line(MARGIN, 29, self.w - MARGIN, 29)
        self.set_y(35)

    def _logo(self, x: float, y: float) -> None:
        """Three fanned sheets of paper in the brand colours, on a rounded navy tile."""
        self.set_fill_color(*NAVY)
        self.rect(x, y, 14, 14, style="F", round_corners=True, corner_radius=2.5)
        for offset, colour in ((0.0, AMBER), (1.6, TEAL), (3.2, (255, 255, 255))):
            self.set_fill_color(*colour)
            left, top = x + 2.6 + offset, y + 2.4 + offset
            # A sheet with its top-right corner folded.
            sheet = [(0.0, 0.0), (6.2, 0.0), (8.0, 1.8), (8.0, 6.0), (0.0, 6.0)]
            self.polygon([(left + dx, top + dy) for dx, dy in sheet], style="F")

    def footer(self) -> None:
        self.set_y(-16)
        self.set_draw_color(*RULE)
        self.set_line_width(0.2)
        self.line(MARGIN, self.get_y(), self.w - MARGIN, self.get_y())
        self.set_y(-14)
        self.set_font("Helvetica", "", 7.5)
        self.set_text_color(*GREY)
        self.cell(
            0, 5, f"{SELLER[0]} \u00b7 {SELLER[1]}, {SELLER[2]} \u00b7 Tax ID 93-4471820", align="L"
        )
        self.set_x(MARGIN)
        self.cell(0, 5, f"{self.invoice.number} \u00b7 Page {self.page_no()} of {{nb}}", align="R")

    def render(self) -> bytes:
        self.add_page()
        self._parties()
        self._items()
        self._closing()
        return bytes(self.output())

    def _parties(self) -> None:
        invoice = self.invoice
        top = self.get_y()
        seller_end = self._address_block(MARGIN, top, "FROM", SELLER[0], SELLER[1:])
        customer_end = self._address_block(
            MARGIN + 62, top, "BILL TO", invoice.customer, invoice.customer_address
        )
        facts = (
            ("Invoice no.", invoice.number),
            ("Issue date", invoice.issued.strftime("%d %b %Y")),
            ("Due date", invoice.due.strftime("%d %b %Y")),
            ("Purchase order", invoice.purchase_order),
            ("Terms", f"Net {PAYMENT_TERMS_DAYS}"),
        )
        box_x, box_w = self.w - MARGIN - 56, 56.0
        self.set_fill_color(*ZEBRA)
        self.rect(box_x, top, box_w, 6 + 5.2 * len(facts), style="F", round_corners=True)
        self.set_y(top + 3)
        for label, value in facts:
            self.set_x(box_x + 3)
            self.set_font("Helvetica", "", 8)
            self.set_text_color(*GREY)
            self.cell(24, 5.2, label)
            self.set_font("Helvetica", "B", 8.5)
            self.set_text_color(*INK)
            self.cell(box_w - 30, 5.2, value, align="R", new_x="LMARGIN", new_y="NEXT")
        self.set_y(max(self.get_y(), seller_end, customer_end) + 8)

    def _address_block(
        self, x: float, y: float, label: str, name: str, lines: tuple[str, ...]
    ) -> float:
        """Draw a labelled address at (x, y); return where it ends."""
        self.set_xy(x, y)
        self.set_font("Helvetica", "B", 7.5)
        self.set_text_color(*TEAL)
        self.cell(58, 5, label, new_x="LEFT", new_y="NEXT")
        self.set_font("Helvetica", "B", 10)
        self.set_text_color(*INK)
        self.multi_cell(58, 5, name, align="L", new_x="LEFT", new_y="NEXT")
        self.set_font("Helvetica", "", 8.5)
        self.set_text_color(*GREY)
        for line in lines:
            self.cell(58, 4.4, line, new_x="LEFT", new_y="NEXT")
        return self.get_y()

    def _items(self) -> None:
        self.set_font("Helvetica", "", 8.5)
        self.set_text_color(*INK)
        self.set_draw_color(*RULE)
        self.set_line_width(0.2)
        headings = FontFace(emphasis="BOLD", color=(255, 255, 255), fill_color=NAVY)
        with self.table(
            col_widths=COLUMN_WIDTHS,
            text_align=COLUMN_ALIGN,
            headings_style=headings,
            borders_layout="HORIZONTAL_LINES",
            cell_fill_color=ZEBRA,
            cell_fill_mode="ROWS",
            line_height=5,
            padding=(1.2, 1.5),
        ) as table:
            table.row(COLUMNS)
            for number, item in enumerate(self.invoice.items, start=1):
                table.row(
                    (
                        str(number),
                        item.description,
                        f"{item.quantity:,}",
                        item.unit,
                        money(item.unit_price),
                        money(item.amount),
                    )
                )

    def _closing(self) -> None:
        if self.will_page_break(CLOSING_HEIGHT):
            self.add_page()
        invoice = self.invoice
        self.ln(4)
        label_x, label_w, value_w = self.w - MARGIN - 80, 48.0, 32.0
        rows = (
            ("Subtotal", money(invoice.subtotal)),
            (f"Sales tax ({TAX_RATE * 100:.3g}%)", money(invoice.tax)),
        )
        for label, value in rows:
            self.set_x(label_x)
            self.set_font("Helvetica", "", 9)
            self.set_text_color(*GREY)
            self.cell(label_w, 6, label, align="R")
            self.set_text_color(*INK)
            self.cell(value_w, 6, value, align="R", new_x="LMARGIN", new_y="NEXT")
        self.ln(1.5)
        self.set_x(label_x)
        self.set_fill_color(*NAVY)
        self.set_text_color(255, 255, 255)
        self.set_font("Helvetica", "B", 11)
        self.cell(label_w, 9, "Total due", align="R", fill=True)
        self.cell(value_w, 9, money(invoice.total), align="R", fill=True)
        self.ln(16)
        self.set_font("Helvetica", "B", 8.5)
        self.set_text_color(*TEAL)
        self.cell(0, 5, "PAYMENT", new_x="LMARGIN", new_y="NEXT")
        self.set_font("Helvetica", "", 8.5)
        self.set_text_color(*GREY)
        self.multi_cell(
            110,
            4.6,
            f"Please pay {money(invoice.total)} by {invoice.due.strftime('%d %B %Y')} to "
            f"account 4471 8820 0193 (routing 123000848), quoting {invoice.number}. "
            f"Questions about this invoice? Write to {SELLER[3]}.",
            align="L",
        )
